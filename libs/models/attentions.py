"""Transformer encoder of the VITS text encoder (self-attention with windowed relative positions) and
the channel layer norm it and the duration predictor share."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

MASKED_SCORE = -1e4  # what VITS fills masked attention scores with; exp() of it is 0 in float32
LAYER_NORM_EPSILON = 1e-5


class LayerNorm(nn.Module):
    """Layer norm over the channel axis of [b, c, t] (VITS names its parameters gamma/beta)."""

    def __init__(self, channels: int, eps: float = LAYER_NORM_EPSILON) -> None:
        super().__init__()
        # A plain int, not x.size(1): the TorchScript ONNX exporter cannot trace a shape into normalized_shape.
        self.channels = channels
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(channels))
        self.beta = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[b, c, t] -> [b, c, t]."""
        return F.layer_norm(x.transpose(1, -1), (self.channels,), self.gamma, self.beta, self.eps).transpose(1, -1)


class MultiHeadAttention(nn.Module):
    """Multi-head self-attention over [b, c, t] with optional relative-position keys and values.

    With `window_size` w, query i sees learned embeddings for key offsets -w..w (shared by all
    heads), added to the content scores and to the attended values (Shaw et al. 2018).
    """

    def __init__(self, channels: int, out_channels: int, n_heads: int, p_dropout: float = 0.0, window_size: int | None = None) -> None:
        super().__init__()
        if channels % n_heads:
            raise ValueError(f"channels ({channels}) must divide into n_heads ({n_heads})")
        self.n_heads = n_heads
        self.k_channels = channels // n_heads
        self.window_size = window_size
        self.conv_q = nn.Conv1d(channels, channels, 1)
        self.conv_k = nn.Conv1d(channels, channels, 1)
        self.conv_v = nn.Conv1d(channels, channels, 1)
        self.conv_o = nn.Conv1d(channels, out_channels, 1)
        self.drop = nn.Dropout(p_dropout)
        if window_size is not None:
            std = self.k_channels**-0.5
            self.emb_rel_k = nn.Parameter(torch.randn(1, 2 * window_size + 1, self.k_channels) * std)
            self.emb_rel_v = nn.Parameter(torch.randn(1, 2 * window_size + 1, self.k_channels) * std)
        for conv in (self.conv_q, self.conv_k, self.conv_v):
            nn.init.xavier_uniform_(conv.weight)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor) -> torch.Tensor:
        """x [b, c, t], attn_mask [b, 1, t, t] (1 where query and key are both valid) -> [b, out, t]."""
        batch, channels, length = x.shape
        heads = lambda t: t.view(batch, self.n_heads, self.k_channels, length).transpose(2, 3)  # noqa: E731
        query = heads(self.conv_q(x)) / math.sqrt(self.k_channels)
        key, value = heads(self.conv_k(x)), heads(self.conv_v(x))

        scores = torch.matmul(query, key.transpose(-2, -1))  # [b, h, t, t]
        if self.window_size is not None:
            offsets, valid = self._offsets(length, x.device)
            rel_logits = torch.matmul(query, self.emb_rel_k.unsqueeze(0).transpose(-2, -1))  # [b, h, t, 2w+1]
            scores = scores + self._relative_to_absolute(rel_logits, offsets, valid)
        scores = scores.masked_fill(attn_mask == 0, MASKED_SCORE)
        weights = self.drop(F.softmax(scores, dim=-1))
        output = torch.matmul(weights, value)
        if self.window_size is not None:
            relative_weights = self._absolute_to_relative(weights)  # [b, h, t, 2w+1]
            output = output + torch.matmul(relative_weights, self.emb_rel_v.unsqueeze(0))
        return self.conv_o(output.transpose(2, 3).reshape(batch, channels, length))

    def _offsets(self, length: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """For every (query i, key j): the relative-embedding index j - i + w, and whether it is in the window."""
        window = self.window_size or 0
        positions = torch.arange(length, device=device)
        offsets = positions.unsqueeze(0) - positions.unsqueeze(1) + window
        valid = (offsets >= 0) & (offsets <= 2 * window)
        return offsets.clamp(0, 2 * window), valid

    def _relative_to_absolute(self, rel_logits: torch.Tensor, offsets: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        batch, heads, length, _ = rel_logits.shape
        gathered = torch.gather(rel_logits, -1, offsets.expand(batch, heads, length, length))
        return gathered * valid

    def _absolute_to_relative(self, weights: torch.Tensor) -> torch.Tensor:
        """weights [b, h, t, t] -> [b, h, t, 2w+1]: entry r is the weight query i gives key i + r - w."""
        window = self.window_size or 0
        batch, heads, length, _ = weights.shape
        positions = torch.arange(length, device=weights.device)
        keys = positions.unsqueeze(1) + torch.arange(-window, window + 1, device=weights.device).unsqueeze(0)
        valid = (keys >= 0) & (keys < length)
        gathered = torch.gather(weights, -1, keys.clamp(0, length - 1).expand(batch, heads, length, 2 * window + 1))
        return gathered * valid


class FFN(nn.Module):
    """Position-wise feed-forward block made of two 'same'-padded convolutions with a ReLU between."""

    def __init__(self, in_channels: int, out_channels: int, filter_channels: int, kernel_size: int, p_dropout: float = 0.0) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.conv_1 = nn.Conv1d(in_channels, filter_channels, kernel_size)
        self.conv_2 = nn.Conv1d(filter_channels, out_channels, kernel_size)
        self.drop = nn.Dropout(p_dropout)

    def forward(self, x: torch.Tensor, x_mask: torch.Tensor) -> torch.Tensor:
        """x [b, c, t] -> [b, out, t], padding zeroed before each convolution."""
        x = torch.relu(self.conv_1(self._pad(x * x_mask)))
        x = self.conv_2(self._pad(self.drop(x) * x_mask))
        return x * x_mask

    def _pad(self, x: torch.Tensor) -> torch.Tensor:
        # Even kernels pad one more on the right, as the reference encoder does.
        return F.pad(x, ((self.kernel_size - 1) // 2, self.kernel_size // 2))


class Encoder(nn.Module):
    """Post-norm transformer encoder; VITS2 can add a speaker embedding before layer `cond_layer_idx`."""

    def __init__(
        self,
        hidden_channels: int,
        filter_channels: int,
        n_heads: int,
        n_layers: int,
        kernel_size: int = 1,
        p_dropout: float = 0.0,
        window_size: int | None = 4,
        gin_channels: int = 0,
        cond_layer_idx: int = 2,
    ) -> None:
        super().__init__()
        self.drop = nn.Dropout(p_dropout)
        self.attn_layers = nn.ModuleList()
        self.norm_layers_1 = nn.ModuleList()
        self.ffn_layers = nn.ModuleList()
        self.norm_layers_2 = nn.ModuleList()
        for _ in range(n_layers):
            self.attn_layers.append(MultiHeadAttention(hidden_channels, hidden_channels, n_heads, p_dropout, window_size))
            self.norm_layers_1.append(LayerNorm(hidden_channels))
            self.ffn_layers.append(FFN(hidden_channels, hidden_channels, filter_channels, kernel_size, p_dropout))
            self.norm_layers_2.append(LayerNorm(hidden_channels))
        self.cond_layer_idx = cond_layer_idx if gin_channels else -1
        if gin_channels:
            if not 0 <= cond_layer_idx < n_layers:
                raise ValueError(f"cond_layer_idx {cond_layer_idx} must be a layer index below {n_layers}")
            self.spk_emb_linear = nn.Linear(gin_channels, hidden_channels)

    def forward(self, x: torch.Tensor, x_mask: torch.Tensor, g: torch.Tensor | None = None) -> torch.Tensor:
        """x [b, c, t], x_mask [b, 1, t], g [b, gin, 1] -> [b, c, t]."""
        attn_mask = x_mask.unsqueeze(2) * x_mask.unsqueeze(-1)
        x = x * x_mask
        for index, (attn, norm_1, ffn, norm_2) in enumerate(
            zip(self.attn_layers, self.norm_layers_1, self.ffn_layers, self.norm_layers_2, strict=False)
        ):
            if index == self.cond_layer_idx and g is not None:
                x = (x + self.spk_emb_linear(g.transpose(1, 2)).transpose(1, 2)) * x_mask
            x = norm_1(x + self.drop(attn(x, attn_mask)))
            x = norm_2(x + self.drop(ffn(x, x_mask)))
        return x * x_mask
