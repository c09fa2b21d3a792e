"""VITS2-style acoustic model: phoneme ids -> the flow's latent z [b, inter_channels, frames].

Module and parameter names follow VITS (enc_p, dp, flow, emb_g), so VITS, VITS2 and Piper weights
load by name and a posterior encoder (enc_q) can be added for training. The decoder is not part of
this model: it is a `libs.models.hifigan.Generator` run separately (the vocoder worker's job).

Inference is split into the steps streaming code calls one by one: `encode`, `durations`,
`expand` (which draws the prior noise for the whole sentence at once), and `flow_inverse`. Every
random draw comes from the torch.Generator the caller passes, seeded from the sentence's inputs (`libs.voice.inputs.SynthesisInputs.seed`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, Final

import torch
from torch import nn

from libs.models import modules
from libs.models.attentions import Encoder, LayerNorm
from libs.models.commons import accept_any_weight_norm_form, normal_noise, repeat_by_durations, sequence_mask

DEFAULT_NOISE_SCALE: Final = 0.667
DEFAULT_LENGTH_SCALE: Final = 1.0
DEFAULT_NOISE_W: Final = 0.8

Generators = torch.Generator | Sequence[torch.Generator]


@dataclass(frozen=True)
class VitsConfig:
    """Every size and switch of the acoustic model (defaults: Piper "medium", single speaker)."""

    n_vocab: int = 256
    """Number of phoneme ids the embedding table holds."""
    inter_channels: int = 192
    """Channels of the latent z and of the prior's mean/log-std."""
    hidden_channels: int = 192
    """Width of the text encoder, the flow's WN stacks and the duration predictors."""
    filter_channels: int = 768
    """Inner width of the text encoder's feed-forward blocks."""
    n_heads: int = 2
    """Attention heads of the text encoder."""
    n_layers: int = 6
    """Transformer layers of the text encoder."""
    kernel_size: int = 3
    """Kernel size of the text encoder's feed-forward convolutions."""
    p_dropout: float = 0.1
    """Dropout in the text encoder (training only)."""
    window_size: int = 4
    """Relative-position window of the text encoder's attention (keys -w..w)."""
    duration_predictor: str = "stochastic"
    """"stochastic" (flow-based, sampled with noise_w) or "deterministic" (regressed log-durations)."""
    sdp_kernel_size: int = 3
    """Kernel size of the stochastic duration predictor's DDS convolutions."""
    sdp_p_dropout: float = 0.5
    """Dropout of the stochastic duration predictor (training only)."""
    sdp_n_flows: int = 4
    """Spline coupling flows in the stochastic duration predictor."""
    dp_filter_channels: int = 256
    """Width of the deterministic duration predictor."""
    dp_kernel_size: int = 3
    """Kernel size of the deterministic duration predictor."""
    dp_p_dropout: float = 0.5
    """Dropout of the deterministic duration predictor (training only)."""
    flow_n_flows: int = 4
    """Coupling layers in the flow (each followed by a channel flip)."""
    flow_kernel_size: int = 5
    """Kernel size of the flow's WN convolutions."""
    flow_dilation_rate: int = 1
    """Dilation growth per WN layer in the flow."""
    flow_n_layers: int = 4
    """WN layers per coupling layer."""
    use_transformer_flows: bool = False
    """VITS2: put a small transformer in every coupling layer (unbounded receptive field)."""
    transformer_flow_type: str = "pre_conv"
    """VITS2 transformer flow variant; "pre_conv" (transformer on the untouched half) is supported."""
    n_speakers: int = 1
    """Speakers in the embedding table; above 1 the model is multi-speaker."""
    gin_channels: int = 0
    """Speaker-embedding channels (0 for a single speaker)."""
    use_spk_conditioned_encoder: bool = False
    """VITS2: add the speaker embedding inside the text encoder."""
    spk_cond_layer_idx: int = 2
    """Text-encoder layer before which the speaker embedding is added."""

    @staticmethod
    def from_dict(config: dict[str, Any]) -> VitsConfig:
        """Build from a dict with any subset of the field names (unknown keys are ignored)."""
        known = {f.name for f in fields(VitsConfig)}
        return VitsConfig(**{key: value for key, value in config.items() if key in known})

    def to_dict(self) -> dict[str, Any]:
        """All fields as a JSON-ready dict."""
        return asdict(self)


def piper_medium_config(n_vocab: int = 256, n_speakers: int = 1, gin_channels: int = 0) -> VitsConfig:
    """Piper "medium" voices: VITS with hidden 192, filter 768, 2 heads, 6 layers, stochastic durations."""
    return VitsConfig(n_vocab=n_vocab, n_speakers=n_speakers, gin_channels=gin_channels if n_speakers > 1 else 0)


def flow_receptive_field_frames(config: VitsConfig) -> int | None:
    """Latent frames of context each side that the flow needs; None when it is unbounded (transformer flows)."""
    if config.use_transformer_flows:
        return None
    half_kernel = (config.flow_kernel_size - 1) // 2
    per_layer = sum(half_kernel * config.flow_dilation_rate**layer for layer in range(config.flow_n_layers))
    return config.flow_n_flows * per_layer


def synthesis_generator(seed: int) -> torch.Generator:
    """A CPU torch.Generator seeded with `seed` (CPU draws are identical on every machine)."""
    return torch.Generator(device="cpu").manual_seed(seed)


class TextEncoder(nn.Module):
    """Phoneme ids -> hidden states and the prior's frame-independent mean and log-std."""

    def __init__(self, config: VitsConfig, gin_channels: int = 0) -> None:
        super().__init__()
        self.hidden_channels = config.hidden_channels
        self.out_channels = config.inter_channels
        self.emb = nn.Embedding(config.n_vocab, config.hidden_channels)
        nn.init.normal_(self.emb.weight, 0.0, config.hidden_channels**-0.5)
        self.encoder = Encoder(
            config.hidden_channels,
            config.filter_channels,
            config.n_heads,
            config.n_layers,
            config.kernel_size,
            config.p_dropout,
            window_size=config.window_size,
            gin_channels=gin_channels,
            cond_layer_idx=config.spk_cond_layer_idx,
        )
        self.proj = nn.Conv1d(config.hidden_channels, config.inter_channels * 2, 1)

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor, g: torch.Tensor | None = None):
        """ids [b, t] -> (hidden [b, h, t], m [b, c, t], logs [b, c, t], x_mask [b, 1, t])."""
        x = (self.emb(ids) * math.sqrt(self.hidden_channels)).transpose(1, 2)
        x_mask = sequence_mask(lengths, ids.size(1)).unsqueeze(1).to(x.dtype)
        x = self.encoder(x * x_mask, x_mask, g=g)
        m, logs = torch.split(self.proj(x) * x_mask, self.out_channels, dim=1)
        return x, m, logs, x_mask


class StochasticDurationPredictor(nn.Module):
    """Flow-based duration model (VITS): samples log-durations from noise scaled by noise_w.

    `post_*` modules and `flows.1` serve only the training objective; inference skips them.
    """

    def __init__(self, channels: int, kernel_size: int, p_dropout: float, n_flows: int = 4, gin_channels: int = 0) -> None:
        super().__init__()
        self.log_flow = modules.Log()
        self.flows = nn.ModuleList([modules.ElementwiseAffine(2)])
        for _ in range(n_flows):
            self.flows.extend([modules.ConvFlow(2, channels, kernel_size, n_layers=3), modules.Flip()])
        self.post_pre = nn.Conv1d(1, channels, 1)
        self.post_proj = nn.Conv1d(channels, channels, 1)
        self.post_convs = modules.DDSConv(channels, kernel_size, n_layers=3, p_dropout=p_dropout)
        self.post_flows = nn.ModuleList([modules.ElementwiseAffine(2)])
        for _ in range(4):
            self.post_flows.extend([modules.ConvFlow(2, channels, kernel_size, n_layers=3), modules.Flip()])
        self.pre = nn.Conv1d(channels, channels, 1)
        self.proj = nn.Conv1d(channels, channels, 1)
        self.convs = modules.DDSConv(channels, kernel_size, n_layers=3, p_dropout=p_dropout)
        if gin_channels:
            self.cond = nn.Conv1d(gin_channels, channels, 1)

    def sample_log_durations(
        self, x: torch.Tensor, x_mask: torch.Tensor, noise: torch.Tensor, g: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Log-durations [b, 1, t] from text hidden states x and noise [b, 2, t] (already scaled by noise_w)."""
        h = self.pre(x.detach())
        if g is not None:
            h = h + self.cond(g.detach())
        h = self.proj(self.convs(h, x_mask)) * x_mask
        # Reverse order; the first spline flow (flows[1]) acts only on the auxiliary channel in
        # training and is dropped at inference, as in VITS.
        z = noise
        for flow in [*reversed(self.flows[2:]), self.flows[0]]:
            z = flow(z, x_mask, g=h, reverse=True)
        return z[:, :1]


class DurationPredictor(nn.Module):
    """Deterministic duration model: two conv + layer-norm blocks regress log-durations."""

    def __init__(self, in_channels: int, filter_channels: int, kernel_size: int, p_dropout: float, gin_channels: int = 0) -> None:
        super().__init__()
        self.drop = nn.Dropout(p_dropout)
        self.conv_1 = nn.Conv1d(in_channels, filter_channels, kernel_size, padding=kernel_size // 2)
        self.norm_1 = LayerNorm(filter_channels)
        self.conv_2 = nn.Conv1d(filter_channels, filter_channels, kernel_size, padding=kernel_size // 2)
        self.norm_2 = LayerNorm(filter_channels)
        self.proj = nn.Conv1d(filter_channels, 1, 1)
        if gin_channels:
            self.cond = nn.Conv1d(gin_channels, in_channels, 1)

    def forward(self, x: torch.Tensor, x_mask: torch.Tensor, g: torch.Tensor | None = None) -> torch.Tensor:
        """Log-durations [b, 1, t]."""
        x = x.detach()
        if g is not None:
            x = x + self.cond(g.detach())
        x = self.drop(self.norm_1(torch.relu(self.conv_1(x * x_mask))))
        x = self.drop(self.norm_2(torch.relu(self.conv_2(x * x_mask))))
        return self.proj(x * x_mask) * x_mask


class ResidualCouplingBlock(nn.Module):
    """The VITS flow: mean-only coupling layers (optionally VITS2 transformer couplings), each then a flip."""

    def __init__(self, config: VitsConfig, gin_channels: int = 0) -> None:
        super().__init__()
        if config.use_transformer_flows and config.transformer_flow_type != "pre_conv":
            raise ValueError(f"unsupported transformer_flow_type {config.transformer_flow_type!r}; use 'pre_conv'")
        layer = modules.TransformerCouplingLayer if config.use_transformer_flows else modules.ResidualCouplingLayer
        self.flows = nn.ModuleList()
        for _ in range(config.flow_n_flows):
            coupling = layer(
                config.inter_channels,
                config.hidden_channels,
                config.flow_kernel_size,
                config.flow_dilation_rate,
                config.flow_n_layers,
                gin_channels=gin_channels,
                mean_only=True,
            )
            self.flows.extend([coupling, modules.Flip()])

    def forward(self, x: torch.Tensor, x_mask: torch.Tensor, g: torch.Tensor | None = None, reverse: bool = False) -> torch.Tensor:
        """z -> z_p (training direction) or, with reverse=True, z_p -> z."""
        if reverse:
            for flow in reversed(self.flows):
                x = flow(x, x_mask, g=g, reverse=True)
            return x
        for flow in self.flows:
            x, _ = flow(x, x_mask, g=g)
        return x


def frames_from_log_durations(logw: torch.Tensor, x_mask: torch.Tensor, length_scale: float = DEFAULT_LENGTH_SCALE) -> torch.Tensor:
    """Frames per token [b, tokens] (int64, 0 on padding) from log-durations [b, 1, tokens]: ceil(exp(logw) * length_scale)."""
    w = torch.exp(logw) * x_mask * length_scale
    return torch.ceil(w).squeeze(1).to(torch.long)


def duration_noise(
    lengths: torch.Tensor, tokens: int, generator: Generators, noise_w: float = DEFAULT_NOISE_W, device: torch.device | None = None
) -> torch.Tensor:
    """The stochastic duration predictor's noise [b, 2, tokens] for sentences of `lengths` tokens
    (padded to `tokens`), drawn from `generator` and scaled by noise_w."""
    shapes = [(2, int(n)) for n in lengths]
    return normal_noise(shapes, (len(shapes), 2, tokens), generator, device=device) * noise_w


@dataclass
class EncoderOutput:
    """What `encode` returns: the text side of the model for a (padded) batch."""

    hidden: torch.Tensor | None
    """Text-encoder states [b, hidden, tokens] (input to the duration predictor); None when the
    predictor ran in one graph with the encoder."""
    m_p: torch.Tensor
    """Prior mean per token [b, inter, tokens]."""
    logs_p: torch.Tensor
    """Prior log-std per token [b, inter, tokens]."""
    x_mask: torch.Tensor
    """1 on real tokens [b, 1, tokens]."""
    lengths: torch.Tensor
    """Tokens per item [b]."""
    g: torch.Tensor | None
    """Speaker embedding [b, gin, 1], None for a single-speaker model."""

    def float(self) -> EncoderOutput:
        """The same outputs in float32 (after a reduced-precision encoder)."""
        as_float = lambda t: None if t is None else t.float()  # noqa: E731
        return EncoderOutput(
            as_float(self.hidden), as_float(self.m_p), as_float(self.logs_p), as_float(self.x_mask), self.lengths, as_float(self.g)
        )


@dataclass
class ExpandedPrior:
    """What `expand` returns: the prior at frame rate and the noise already drawn for it."""

    m_p: torch.Tensor
    """Prior mean per frame [b, inter, frames]."""
    logs_p: torch.Tensor
    """Prior log-std per frame [b, inter, frames]."""
    z_p: torch.Tensor
    """m_p + noise * exp(logs_p) * noise_scale, drawn for the whole sentence [b, inter, frames]."""
    y_mask: torch.Tensor
    """1 on real frames [b, 1, frames]."""
    frame_lengths: torch.Tensor
    """Frames per item [b]."""


@dataclass
class AcousticOutput:
    """What `infer` returns."""

    z: torch.Tensor
    """Latent for the decoder [b, inter, frames], zero past each item's length."""
    y_mask: torch.Tensor
    """1 on real frames [b, 1, frames]."""
    durations: torch.Tensor
    """Frames per token [b, tokens] (int64), for alignment and timestamps."""
    frame_lengths: torch.Tensor
    """Frames per item [b]."""


class VitsAcoustic(nn.Module):
    """Text encoder, duration predictor and flow of a VITS/VITS2 voice (no posterior encoder, no decoder)."""

    def __init__(self, config: VitsConfig) -> None:
        super().__init__()
        self.config = config
        gin = config.gin_channels if config.n_speakers > 1 else 0
        self.enc_p = TextEncoder(config, gin_channels=gin if config.use_spk_conditioned_encoder else 0)
        if config.duration_predictor == "stochastic":
            self.dp: nn.Module = StochasticDurationPredictor(
                config.hidden_channels, config.sdp_kernel_size, config.sdp_p_dropout, config.sdp_n_flows, gin_channels=gin
            )
        elif config.duration_predictor == "deterministic":
            self.dp = DurationPredictor(
                config.hidden_channels, config.dp_filter_channels, config.dp_kernel_size, config.dp_p_dropout, gin_channels=gin
            )
        else:
            raise ValueError(f"duration_predictor must be 'stochastic' or 'deterministic', got {config.duration_predictor!r}")
        self.flow = ResidualCouplingBlock(config, gin_channels=gin)
        if config.n_speakers > 1:
            self.emb_g = nn.Embedding(config.n_speakers, config.gin_channels)
        accept_any_weight_norm_form(self)

    def remove_weight_norm(self) -> None:
        """Fold the flow's weight norm into plain weights (once, before inference)."""
        for flow in self.flow.flows:
            if isinstance(flow, modules.ResidualCouplingLayer):
                flow.remove_weight_norm()

    def encode(
        self,
        phoneme_ids: torch.Tensor,
        lengths: torch.Tensor | None = None,
        speaker_id: torch.Tensor | int | None = None,
    ) -> EncoderOutput:
        """Run the text encoder on ids [b, tokens] (padded; `lengths` [b] defaults to the full width)."""
        if phoneme_ids.dim() == 1:
            phoneme_ids = phoneme_ids.unsqueeze(0)
        if lengths is None:
            lengths = torch.full((phoneme_ids.size(0),), phoneme_ids.size(1), dtype=torch.long, device=phoneme_ids.device)
        g = self.speaker_embedding(speaker_id, phoneme_ids.size(0), phoneme_ids.device)
        hidden, m_p, logs_p, x_mask = self.enc_p(phoneme_ids, lengths, g=g if self.config.use_spk_conditioned_encoder else None)
        return EncoderOutput(hidden, m_p, logs_p, x_mask, lengths, g)

    def speaker_embedding(
        self, speaker_id: torch.Tensor | int | None, batch_size: int, device: torch.device | str = "cpu"
    ) -> torch.Tensor | None:
        """Speaker conditioning g [batch, gin, 1] for a multi-speaker model, None for a single speaker."""
        if self.config.n_speakers <= 1:
            return None
        if speaker_id is None:
            raise ValueError(f"this voice has {self.config.n_speakers} speakers: pass speaker_id")
        sid = torch.as_tensor(speaker_id, dtype=torch.long, device=device).reshape(-1).expand(batch_size)
        return self.emb_g(sid).unsqueeze(-1)

    def durations(
        self,
        encoded: EncoderOutput,
        generator: Generators,
        noise_w: float = DEFAULT_NOISE_W,
        length_scale: float = DEFAULT_LENGTH_SCALE,
    ) -> torch.Tensor:
        """Frames per token [b, tokens] (int64, 0 on padding): ceil(exp(logw) * length_scale).

        The stochastic predictor always draws its noise (even at noise_w 0) so later draws from
        the same generator do not depend on noise_w's value.
        """
        x, x_mask = encoded.hidden, encoded.x_mask
        if isinstance(self.dp, StochasticDurationPredictor):
            noise = self.duration_noise(encoded, generator, noise_w)
            logw = self.dp.sample_log_durations(x, x_mask, noise, g=encoded.g)
        else:
            logw = self.dp(x, x_mask, g=encoded.g)
        return frames_from_log_durations(logw, x_mask, length_scale)

    def duration_noise(self, encoded: EncoderOutput, generator: Generators, noise_w: float = DEFAULT_NOISE_W) -> torch.Tensor:
        """The stochastic duration predictor's noise [b, 2, tokens], drawn from `generator` and scaled by noise_w.

        `durations` draws exactly this; a caller that runs the predictor elsewhere draws it here, so
        the generator's later draws (the prior noise of `expand`) stay the same.
        """
        return duration_noise(encoded.lengths, encoded.x_mask.size(2), generator, noise_w, encoded.x_mask.device)

    def expand(
        self,
        encoded: EncoderOutput,
        durations: torch.Tensor,
        generator: Generators,
        noise_scale: float = DEFAULT_NOISE_SCALE,
    ) -> ExpandedPrior:
        """Repeat each token's prior over its frames and draw z_p for the whole sentence at once.

        Drawing all the noise here means chunked processing later draws nothing new, so any
        chunking gives the same latent.
        """
        frame_lengths = torch.clamp_min(durations.sum(dim=1), 1)
        frame_count = int(frame_lengths.max())
        y_mask = sequence_mask(frame_lengths, frame_count).unsqueeze(1).to(encoded.m_p.dtype)
        m_p = repeat_by_durations(encoded.m_p, durations, frame_count)
        logs_p = repeat_by_durations(encoded.logs_p, durations, frame_count)
        channels = m_p.size(1)
        shapes = [(channels, int(n)) for n in frame_lengths]
        noise = normal_noise(shapes, tuple(m_p.shape), generator, device=m_p.device)
        z_p = m_p + noise * torch.exp(logs_p) * noise_scale
        return ExpandedPrior(m_p, logs_p, z_p, y_mask, frame_lengths)

    def flow_inverse(self, z_p: torch.Tensor, y_mask: torch.Tensor, g: torch.Tensor | None = None) -> torch.Tensor:
        """Latent z [b, inter, frames] from prior samples z_p, zero past each item's length."""
        return self.flow(z_p, y_mask, g=g, reverse=True) * y_mask

    def infer(
        self,
        phoneme_ids: torch.Tensor,
        generator: Generators,
        lengths: torch.Tensor | None = None,
        speaker_id: torch.Tensor | int | None = None,
        noise_scale: float = DEFAULT_NOISE_SCALE,
        length_scale: float = DEFAULT_LENGTH_SCALE,
        noise_w: float = DEFAULT_NOISE_W,
    ) -> AcousticOutput:
        """encode -> durations -> expand -> flow_inverse in one call."""
        encoded = self.encode(phoneme_ids, lengths, speaker_id)
        durations = self.durations(encoded, generator, noise_w=noise_w, length_scale=length_scale)
        prior = self.expand(encoded, durations, generator, noise_scale=noise_scale)
        z = self.flow_inverse(prior.z_p, prior.y_mask, encoded.g)
        return AcousticOutput(z, prior.y_mask, durations, prior.frame_lengths)
