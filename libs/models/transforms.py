"""Monotonic rational-quadratic spline with linear tails (Durkan et al. 2019, "Neural Spline Flows").

The stochastic duration predictor's coupling flows use it; inside [-tail_bound, tail_bound] the
spline maps the interval onto itself, outside it is the identity.
"""

from __future__ import annotations

import math
from typing import Final

import torch
from torch.nn import functional as F

MIN_BIN_WIDTH: Final = 1e-3
MIN_BIN_HEIGHT: Final = 1e-3
MIN_DERIVATIVE: Final = 1e-3
SEARCH_EPSILON: Final = 1e-6


def _knots(unnormalized: torch.Tensor, min_size: float, bound: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Bin sizes and knot positions (num_bins + 1) covering [-bound, bound]."""
    num_bins = unnormalized.shape[-1]
    sizes = min_size + (1 - min_size * num_bins) * F.softmax(unnormalized, dim=-1)
    knots = F.pad(torch.cumsum(sizes, dim=-1), (1, 0))
    knots = 2 * bound * knots - bound
    # Pin the ends exactly so round-off cannot leave a gap at the boundaries.
    knots = torch.cat([torch.full_like(knots[..., :1], -bound), knots[..., 1:-1], torch.full_like(knots[..., :1], bound)], dim=-1)
    return knots[..., 1:] - knots[..., :-1], knots


def rational_quadratic_spline(
    inputs: torch.Tensor,
    unnormalized_widths: torch.Tensor,
    unnormalized_heights: torch.Tensor,
    unnormalized_derivatives: torch.Tensor,
    inverse: bool = False,
    tail_bound: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Apply the spline (or its inverse) elementwise; returns (outputs, log|d outputs / d inputs|).

    `unnormalized_widths`/`heights` are [..., num_bins] and `unnormalized_derivatives` is
    [..., num_bins - 1] (interior knots); the end derivatives are fixed at 1 to meet the tails.
    """
    inside = (inputs >= -tail_bound) & (inputs <= tail_bound)
    # softplus(end) + MIN_DERIVATIVE == 1 at both ends, matching the identity tails.
    end = math.log(math.exp(1 - MIN_DERIVATIVE) - 1)
    unnormalized_derivatives = F.pad(unnormalized_derivatives, (1, 1), value=end)
    derivatives = MIN_DERIVATIVE + F.softplus(unnormalized_derivatives)
    widths, cumwidths = _knots(unnormalized_widths, MIN_BIN_WIDTH, tail_bound)
    heights, cumheights = _knots(unnormalized_heights, MIN_BIN_HEIGHT, tail_bound)

    x = inputs.clamp(-tail_bound, tail_bound)
    search = cumheights if inverse else cumwidths
    search = torch.cat([search[..., :-1], search[..., -1:] + SEARCH_EPSILON], dim=-1)
    num_bins = widths.shape[-1]
    bin_index = (torch.sum(x.unsqueeze(-1) >= search, dim=-1) - 1).clamp(0, num_bins - 1).unsqueeze(-1)

    pick = lambda t: t.gather(-1, bin_index).squeeze(-1)  # noqa: E731
    x_left, bin_width = pick(cumwidths), pick(widths)
    y_low, bin_height = pick(cumheights), pick(heights)
    slope = bin_height / bin_width
    d_left, d_right = pick(derivatives), derivatives[..., 1:].gather(-1, bin_index).squeeze(-1)
    curvature = d_left + d_right - 2 * slope

    if inverse:
        shifted = x - y_low
        a = shifted * curvature + bin_height * (slope - d_left)
        b = bin_height * d_left - shifted * curvature
        c = -slope * shifted
        theta = (2 * c) / (-b - torch.sqrt(b.pow(2) - 4 * a * c))
        outputs = theta * bin_width + x_left
    else:
        theta = (x - x_left) / bin_width
        theta_one_minus = theta * (1 - theta)
        outputs = y_low + bin_height * (slope * theta.pow(2) + d_left * theta_one_minus) / (slope + curvature * theta_one_minus)

    theta_one_minus = theta * (1 - theta)
    denominator = slope + curvature * theta_one_minus
    numerator = slope.pow(2) * (d_right * theta.pow(2) + 2 * slope * theta_one_minus + d_left * (1 - theta).pow(2))
    logabsdet = torch.log(numerator) - 2 * torch.log(denominator)
    if inverse:
        logabsdet = -logabsdet
    return torch.where(inside, outputs, inputs), torch.where(inside, logabsdet, torch.zeros_like(logabsdet))
