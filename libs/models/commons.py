"""Small tensor helpers shared by the acoustic model and the vocoder."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torch.nn.utils import parametrizations, parametrize


def conv_padding(kernel_size: int, dilation: int = 1) -> int:
    """Symmetric padding that keeps the length of a stride-1 convolution."""
    return (kernel_size * dilation - dilation) // 2


def sequence_mask(lengths: torch.Tensor, max_length: int | None = None) -> torch.Tensor:
    """Boolean [batch, max_length] mask, True where the position is inside the item's length."""
    if max_length is None:
        max_length = int(lengths.max())
    positions = torch.arange(max_length, dtype=lengths.dtype, device=lengths.device)
    return positions.unsqueeze(0) < lengths.unsqueeze(1)


def gated_activation(x_in: torch.Tensor, cond: torch.Tensor | None, hidden_channels: int) -> torch.Tensor:
    """WaveNet gate: tanh(first half) * sigmoid(second half) of x_in + cond."""
    if cond is not None:
        x_in = x_in + cond
    return torch.tanh(x_in[:, :hidden_channels]) * torch.sigmoid(x_in[:, hidden_channels:])


def repeat_by_durations(x: torch.Tensor, durations: torch.Tensor, frame_count: int) -> torch.Tensor:
    """Each token's column of x [batch, channels, tokens] repeated for its integer duration
    [batch, tokens]: [batch, channels, frame_count], zero past each item's frames.

    It is the hard monotonic alignment (frame f belongs to token t when cumsum(d)[t-1] <= f <
    cumsum(d)[t]) applied as a gather rather than a matrix product: the same values, bit for bit.
    """
    expanded = x.new_zeros(x.size(0), x.size(1), frame_count)
    for item in range(x.size(0)):
        columns = torch.repeat_interleave(x[item], durations[item], dim=1)
        expanded[item, :, : columns.size(1)] = columns
    return expanded


def normal_noise(
    shape_per_item: Sequence[tuple[int, ...]],
    padded_shape: tuple[int, ...],
    generators: torch.Generator | Sequence[torch.Generator],
    device: torch.device | None = None,
) -> torch.Tensor:
    """Standard normal noise for a padded batch, drawn item by item from each item's generator.

    Drawing each item's unpadded shape from its own generator makes an item's noise independent of
    what else is in the batch, so a batched request gives the same samples as the request alone.
    """
    if isinstance(generators, torch.Generator):
        generators = [generators] * len(shape_per_item)
    if len(generators) != len(shape_per_item):
        raise ValueError(f"need one generator per batch item: {len(generators)} for {len(shape_per_item)} items")
    noise = torch.zeros(padded_shape, device=device)
    for index, (shape, generator) in enumerate(zip(shape_per_item, generators, strict=False)):
        draw = torch.randn(shape, generator=generator, device=generator.device)
        noise[(index, *tuple(slice(0, size) for size in shape))] = draw.to(noise.device)
    return noise


def add_weight_norm(module: nn.Module) -> nn.Module:
    """Weight-normalise `module.weight` (magnitude per output channel of dim 0, as in HiFi-GAN)."""
    return parametrizations.weight_norm(module, name="weight", dim=0)


def strip_weight_norm(module: nn.Module) -> None:
    """Fold a weight-norm parametrisation into a plain weight (no-op when there is none)."""
    if parametrize.is_parametrized(module, "weight"):
        parametrize.remove_parametrizations(module, "weight", leave_parametrized=True)


def fold_weight_norm(weight_g: torch.Tensor, weight_v: torch.Tensor) -> torch.Tensor:
    """Plain weight from a magnitude g and direction v, the norm taken over every dim but 0."""
    dims = tuple(range(1, weight_v.dim()))
    return weight_v * (weight_g / torch.linalg.vector_norm(weight_v, dim=dims, keepdim=True))


def split_weight_norm(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(g, v) with fold_weight_norm(g, v) == weight: v is the weight itself, g its norm."""
    dims = tuple(range(1, weight.dim()))
    return torch.linalg.vector_norm(weight, dim=dims, keepdim=True), weight.clone()


_PARAMETRIZED_G = "parametrizations.weight.original0"
_PARAMETRIZED_V = "parametrizations.weight.original1"
_WEIGHT_SUFFIXES = (".weight_g", ".weight_v", "." + _PARAMETRIZED_G, "." + _PARAMETRIZED_V, ".weight")


def adapt_weight_norm_keys(module: nn.Module, state_dict: dict[str, torch.Tensor], prefix: str = "") -> None:
    """Rewrite `state_dict` in place so its weight keys match how `module` holds its weights now.

    Checkpoints come in three forms: the old torch names (`weight_g`/`weight_v`, as public HiFi-GAN
    and VITS checkpoints have them), torch 2 parametrisation names, and folded plain weights
    (exported or weight norm removed). Any of them loads into a module in any of those states.
    """
    own_keys = set(module.state_dict().keys())
    stems: set[str] = set()
    for key in list(state_dict):
        for suffix in _WEIGHT_SUFFIXES:
            if key.startswith(prefix) and key.endswith(suffix):
                stems.add(key[len(prefix) : -len(suffix)])
    for stem in stems:
        full = prefix + stem
        g = state_dict.get(f"{full}.weight_g", state_dict.get(f"{full}.{_PARAMETRIZED_G}"))
        v = state_dict.get(f"{full}.weight_v", state_dict.get(f"{full}.{_PARAMETRIZED_V}"))
        plain = state_dict.get(f"{full}.weight")
        wants_parametrized = f"{stem}.{_PARAMETRIZED_G}" in own_keys
        if wants_parametrized:
            if g is None or v is None:
                if plain is None:
                    continue
                g, v = split_weight_norm(plain)
            replacement = {f"{full}.{_PARAMETRIZED_G}": g, f"{full}.{_PARAMETRIZED_V}": v}
        elif f"{stem}.weight" in own_keys:
            if plain is None:
                if g is None or v is None:
                    continue
                plain = fold_weight_norm(g, v)
            replacement = {f"{full}.weight": plain}
        else:
            continue
        for suffix in _WEIGHT_SUFFIXES:
            state_dict.pop(full + suffix, None)
        state_dict.update(replacement)


def accept_any_weight_norm_form(module: nn.Module) -> None:
    """Make `module.load_state_dict` accept weights in any of the forms adapt_weight_norm_keys knows."""

    def hook(target: nn.Module, state_dict: dict, prefix: str, *unused: object) -> None:
        adapt_weight_norm_keys(target, state_dict, prefix)

    module.register_load_state_dict_pre_hook(hook)


def to_legacy_weight_norm_keys(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Copy of `state_dict` with torch 2 weight-norm names renamed to the old `weight_g`/`weight_v`.

    This is the form public HiFi-GAN and VITS checkpoints use, so files we write load there too.
    """
    legacy: dict[str, torch.Tensor] = {}
    for key, value in state_dict.items():
        if key.endswith("." + _PARAMETRIZED_G):
            key = key[: -len(_PARAMETRIZED_G)] + "weight_g"
        elif key.endswith("." + _PARAMETRIZED_V):
            key = key[: -len(_PARAMETRIZED_V)] + "weight_v"
        legacy[key] = value
    return legacy
