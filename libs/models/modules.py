"""Building blocks of the VITS acoustic model: normalisation, WaveNet stacks and invertible flows.

Parameter names follow VITS so that VITS, VITS2 and Piper weights load by name. Every flow has
`forward(x, x_mask, g=None, reverse=False)`; forward returns (y, logdet) for training, reverse
returns the inverse alone.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from libs.models.attentions import Encoder, LayerNorm
from libs.models.commons import add_weight_norm, conv_padding, gated_activation, strip_weight_norm
from libs.models.transforms import rational_quadratic_spline


class DDSConv(nn.Module):
    """Dilated depth-separable convolutions (dilation kernel_size**i) with residual connections."""

    def __init__(self, channels: int, kernel_size: int, n_layers: int, p_dropout: float = 0.0) -> None:
        super().__init__()
        self.drop = nn.Dropout(p_dropout)
        self.convs_sep = nn.ModuleList()
        self.convs_1x1 = nn.ModuleList()
        self.norms_1 = nn.ModuleList()
        self.norms_2 = nn.ModuleList()
        for layer in range(n_layers):
            dilation = kernel_size**layer
            self.convs_sep.append(
                nn.Conv1d(channels, channels, kernel_size, groups=channels, dilation=dilation, padding=conv_padding(kernel_size, dilation))
            )
            self.convs_1x1.append(nn.Conv1d(channels, channels, 1))
            self.norms_1.append(LayerNorm(channels))
            self.norms_2.append(LayerNorm(channels))

    def forward(self, x: torch.Tensor, x_mask: torch.Tensor, g: torch.Tensor | None = None) -> torch.Tensor:
        """x [b, c, t] (+ g broadcastable to it) -> [b, c, t]."""
        if g is not None:
            x = x + g
        for sep, pointwise, norm_1, norm_2 in zip(self.convs_sep, self.convs_1x1, self.norms_1, self.norms_2, strict=False):
            y = F.gelu(norm_1(sep(x * x_mask)))
            y = F.gelu(norm_2(pointwise(y)))
            x = x + self.drop(y)
        return x * x_mask


class WN(nn.Module):
    """Non-causal WaveNet stack: gated dilated convolutions with residual and skip outputs."""

    def __init__(
        self,
        hidden_channels: int,
        kernel_size: int,
        dilation_rate: int,
        n_layers: int,
        gin_channels: int = 0,
        p_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if kernel_size % 2 != 1:
            raise ValueError(f"WN needs an odd kernel size, got {kernel_size}")
        self.hidden_channels = hidden_channels
        self.n_layers = n_layers
        self.drop = nn.Dropout(p_dropout)
        self.in_layers = nn.ModuleList()
        self.res_skip_layers = nn.ModuleList()
        if gin_channels:
            self.cond_layer = add_weight_norm(nn.Conv1d(gin_channels, 2 * hidden_channels * n_layers, 1))
        for layer in range(n_layers):
            dilation = dilation_rate**layer
            self.in_layers.append(
                add_weight_norm(
                    nn.Conv1d(hidden_channels, 2 * hidden_channels, kernel_size, dilation=dilation, padding=conv_padding(kernel_size, dilation))
                )
            )
            # The last layer only feeds the skip sum, so it needs no residual half.
            out_channels = 2 * hidden_channels if layer < n_layers - 1 else hidden_channels
            self.res_skip_layers.append(add_weight_norm(nn.Conv1d(hidden_channels, out_channels, 1)))

    def forward(self, x: torch.Tensor, x_mask: torch.Tensor, g: torch.Tensor | None = None) -> torch.Tensor:
        """x [b, hidden, t] -> skip sum [b, hidden, t]."""
        output = torch.zeros_like(x)
        cond = self.cond_layer(g) if g is not None else None
        width = 2 * self.hidden_channels
        for layer, (in_layer, res_skip) in enumerate(zip(self.in_layers, self.res_skip_layers, strict=False)):
            layer_cond = cond[:, layer * width : (layer + 1) * width] if cond is not None else None
            acts = self.drop(gated_activation(in_layer(x), layer_cond, self.hidden_channels))
            res_skip_acts = res_skip(acts)
            if layer < self.n_layers - 1:
                x = (x + res_skip_acts[:, : self.hidden_channels]) * x_mask
                output = output + res_skip_acts[:, self.hidden_channels :]
            else:
                output = output + res_skip_acts
        return output * x_mask

    def remove_weight_norm(self) -> None:
        """Fold weight norm into plain weights for inference."""
        for module in (*self.in_layers, *self.res_skip_layers, *([self.cond_layer] if hasattr(self, "cond_layer") else [])):
            strip_weight_norm(module)


class Flip(nn.Module):
    """Reverses the channel order so the next coupling layer transforms the other half."""

    def forward(self, x: torch.Tensor, *args: object, reverse: bool = False, **kwargs: object):
        x = torch.flip(x, [1])
        if reverse:
            return x
        return x, torch.zeros(x.size(0), dtype=x.dtype, device=x.device)


class ElementwiseAffine(nn.Module):
    """y = m + exp(logs) * x per channel."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.m = nn.Parameter(torch.zeros(channels, 1))
        self.logs = nn.Parameter(torch.zeros(channels, 1))

    def forward(self, x: torch.Tensor, x_mask: torch.Tensor, reverse: bool = False, **kwargs: object):
        if reverse:
            return (x - self.m) * torch.exp(-self.logs) * x_mask
        y = (self.m + torch.exp(self.logs) * x) * x_mask
        return y, torch.sum(self.logs * x_mask, [1, 2])


class Log(nn.Module):
    """y = log(x) on positive inputs (durations), exp in reverse."""

    def forward(self, x: torch.Tensor, x_mask: torch.Tensor, reverse: bool = False, **kwargs: object):
        if reverse:
            return torch.exp(x) * x_mask
        y = torch.log(torch.clamp_min(x, 1e-5)) * x_mask
        return y, torch.sum(-y, [1, 2])


class ResidualCouplingLayer(nn.Module):
    """Affine coupling: the second half of the channels is shifted (and scaled) by a WN of the first half."""

    def __init__(
        self,
        channels: int,
        hidden_channels: int,
        kernel_size: int,
        dilation_rate: int,
        n_layers: int,
        p_dropout: float = 0.0,
        gin_channels: int = 0,
        mean_only: bool = False,
    ) -> None:
        super().__init__()
        if channels % 2:
            raise ValueError(f"coupling needs an even channel count, got {channels}")
        self.half_channels = channels // 2
        self.mean_only = mean_only
        self.pre = nn.Conv1d(self.half_channels, hidden_channels, 1)
        self.enc = WN(hidden_channels, kernel_size, dilation_rate, n_layers, gin_channels=gin_channels, p_dropout=p_dropout)
        self.post = nn.Conv1d(hidden_channels, self.half_channels * (1 if mean_only else 2), 1)
        # Start as the identity so training begins from a stable flow.
        nn.init.zeros_(self.post.weight)
        nn.init.zeros_(self.post.bias)

    def conditioning(self, x0: torch.Tensor, x_mask: torch.Tensor, g: torch.Tensor | None) -> torch.Tensor:
        """Hidden features of the untouched half that set the shift and scale."""
        return self.enc(self.pre(x0) * x_mask, x_mask, g=g)

    def forward(self, x: torch.Tensor, x_mask: torch.Tensor, g: torch.Tensor | None = None, reverse: bool = False):
        x0, x1 = torch.split(x, [self.half_channels] * 2, 1)
        stats = self.post(self.conditioning(x0, x_mask, g)) * x_mask
        if self.mean_only:
            m, logs = stats, torch.zeros_like(stats)
        else:
            m, logs = torch.split(stats, [self.half_channels] * 2, 1)
        if reverse:
            x1 = (x1 - m) * torch.exp(-logs) * x_mask
            return torch.cat([x0, x1], 1)
        x1 = m + x1 * torch.exp(logs) * x_mask
        return torch.cat([x0, x1], 1), torch.sum(logs, [1, 2])

    def remove_weight_norm(self) -> None:
        """Fold weight norm into plain weights for inference."""
        self.enc.remove_weight_norm()


class TransformerCouplingLayer(ResidualCouplingLayer):
    """VITS2 coupling layer: a small transformer over the untouched half before the WN ("pre_conv").

    Attention is global, so the flow's receptive field becomes the whole sentence.
    """

    def __init__(
        self,
        channels: int,
        hidden_channels: int,
        kernel_size: int,
        dilation_rate: int,
        n_layers: int,
        p_dropout: float = 0.0,
        gin_channels: int = 0,
        mean_only: bool = False,
        transformer_layers: int = 2,
        transformer_heads: int = 2,
        transformer_kernel_size: int = 3,
        transformer_dropout: float = 0.1,
    ) -> None:
        super().__init__(channels, hidden_channels, kernel_size, dilation_rate, n_layers, p_dropout, gin_channels, mean_only)
        self.pre_transformer = Encoder(
            self.half_channels,
            self.half_channels,
            n_heads=transformer_heads,
            n_layers=transformer_layers,
            kernel_size=transformer_kernel_size,
            p_dropout=transformer_dropout,
            window_size=None,
        )

    def conditioning(self, x0: torch.Tensor, x_mask: torch.Tensor, g: torch.Tensor | None) -> torch.Tensor:
        x0 = x0 + self.pre_transformer(x0 * x_mask, x_mask)
        return self.enc(self.pre(x0) * x_mask, x_mask, g=g)


class ConvFlow(nn.Module):
    """Spline coupling of the duration predictor: DDSConv features of one half set a spline on the other."""

    def __init__(self, in_channels: int, filter_channels: int, kernel_size: int, n_layers: int, num_bins: int = 10, tail_bound: float = 5.0) -> None:
        super().__init__()
        self.filter_channels = filter_channels
        self.num_bins = num_bins
        self.tail_bound = tail_bound
        self.half_channels = in_channels // 2
        self.pre = nn.Conv1d(self.half_channels, filter_channels, 1)
        self.convs = DDSConv(filter_channels, kernel_size, n_layers, p_dropout=0.0)
        self.proj = nn.Conv1d(filter_channels, self.half_channels * (num_bins * 3 - 1), 1)
        nn.init.zeros_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)

    def forward(self, x: torch.Tensor, x_mask: torch.Tensor, g: torch.Tensor | None = None, reverse: bool = False):
        x0, x1 = torch.split(x, [self.half_channels] * 2, 1)
        h = self.proj(self.convs(self.pre(x0), x_mask, g=g)) * x_mask
        batch, channels, length = x0.shape
        h = h.reshape(batch, channels, -1, length).permute(0, 1, 3, 2)  # [b, c, t, 3 * bins - 1]
        scale = math.sqrt(self.filter_channels)
        x1, logabsdet = rational_quadratic_spline(
            x1,
            h[..., : self.num_bins] / scale,
            h[..., self.num_bins : 2 * self.num_bins] / scale,
            h[..., 2 * self.num_bins :],
            inverse=reverse,
            tail_bound=self.tail_bound,
        )
        x = torch.cat([x0, x1], 1) * x_mask
        if reverse:
            return x
        return x, torch.sum(logabsdet * x_mask, [1, 2])
