"""Piper-format voices made in the tests: our VITS modules in small configurations (one or several
speakers, 22,050 or 16,000 Hz), seeded random weights, exported as Piper exports its voices.

The graph is Piper's: inputs `input` [1, T] int64, `input_lengths` [1], `scales` [3] (noise_scale,
length_scale, noise_w) and, for several speakers, `sid` [1]; output `output`, the audio. Inside,
VITS inference as Piper runs it (text encoder, stochastic durations with noise drawn in the graph,
the monotonic path, the prior noise, the flow backwards, the decoder), with the parameters under
their module names, weight norm folded. The config is a Piper .onnx.json with the phoneme-id map
every Piper espeak voice shares. Such a voice speaks noise (its weights are random): the tests use
it for structure (import, build, catalogue), never for how it sounds.
"""

from __future__ import annotations

import io
import json
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from libs.models.hifigan import Generator, GeneratorConfig
from libs.models.vits import VitsAcoustic, VitsConfig
from libs.voice.registry import default_registry
from scripts.voice.build import BuildConfig, add_voice
from scripts.voice.teacher import TeacherConfig
from scripts.voice.train import DecoderTuneConfig, RegressionConfig

OPSET = 15


@dataclass(frozen=True)
class TinyVoice:
    """What a test voice is like."""

    name: str
    """Its name (the files are NAME.onnx and NAME.onnx.json)."""
    sample_rate_hz: int = 22_050
    """22,050 ("medium") or 16,000 ("low")."""
    speakers: tuple[str, ...] = ()
    """Speaker names; empty for a voice of one speaker."""
    espeak_voice: str = "en-us"
    """The espeak-ng voice its phonemes come from ("cmn" for a Mandarin voice)."""
    language_code: str = "en_US"
    """Piper's language code."""
    seed: int = 0
    """Seed of the random weights."""

    @property
    def quality(self) -> str:
        return "low" if self.sample_rate_hz == 16_000 else "medium"


def tiny_configs(voice: TinyVoice) -> tuple[VitsConfig, GeneratorConfig]:
    """A small acoustic model and decoder of Piper's shapes (hop 256, latent 192)."""
    speakers = max(1, len(voice.speakers))
    gin = 16 if speakers > 1 else 0
    acoustic = VitsConfig(
        n_vocab=256, hidden_channels=32, filter_channels=64, n_heads=2, n_layers=2, flow_n_flows=2, flow_n_layers=2,
        n_speakers=speakers, gin_channels=gin,
    )  # fmt: skip
    decoder = GeneratorConfig(
        resblock="2", upsample_rates=(8, 8, 4), upsample_kernel_sizes=(16, 16, 8), upsample_initial_channel=32,
        resblock_kernel_sizes=(3, 5, 7), resblock_dilation_sizes=((1, 2), (2, 6), (3, 12)), in_channels=192,
        io_weight_norm=False, post_bias=False, gin_channels=gin,
    )  # fmt: skip
    return acoustic, decoder


def _sequence_mask(lengths: torch.Tensor, max_length: torch.Tensor | None = None) -> torch.Tensor:
    if max_length is None:
        max_length = lengths.max()
    return torch.arange(max_length, dtype=lengths.dtype, device=lengths.device).unsqueeze(0) < lengths.unsqueeze(1)


def _monotonic_path(durations: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """VITS's hard alignment from whole-frame durations [b, 1, tokens]: path [b, 1, frames, tokens]."""
    batch, _, frames, tokens = mask.shape
    ends = torch.cumsum(durations, -1).view(batch * tokens)
    path = _sequence_mask(ends, torch.tensor(frames)).to(mask.dtype).view(batch, tokens, frames)
    path = path - F.pad(path, [0, 0, 1, 0])[:, :-1]
    return path.unsqueeze(1).transpose(2, 3) * mask


class PiperGraph(nn.Module):
    """VITS inference as Piper exports it, over our modules (held under their VITS names)."""

    def __init__(self, acoustic: VitsAcoustic, decoder: Generator) -> None:
        super().__init__()
        self.enc_p, self.dp, self.flow, self.dec = acoustic.enc_p, acoustic.dp, acoustic.flow, decoder
        self.emb_g = acoustic.emb_g if acoustic.config.n_speakers > 1 else None

    def forward(self, input: torch.Tensor, input_lengths: torch.Tensor, scales: torch.Tensor, sid: torch.Tensor | None = None) -> torch.Tensor:
        noise_scale, length_scale, noise_w = scales[0], scales[1], scales[2]
        g = self.emb_g(sid).unsqueeze(-1) if self.emb_g is not None and sid is not None else None
        x, m_p, logs_p, x_mask = self.enc_p(input, input_lengths)
        noise = torch.randn_like(m_p[:, :2, :]) * noise_w
        logw = self.dp.sample_log_durations(x, x_mask, noise, g=g)
        durations = torch.ceil(torch.exp(logw) * x_mask * length_scale)
        frame_lengths = torch.clamp_min(torch.sum(durations, [1, 2]), 1).long()
        y_mask = _sequence_mask(frame_lengths).unsqueeze(1).to(x_mask.dtype)
        path = _monotonic_path(durations, x_mask.unsqueeze(2) * y_mask.unsqueeze(-1))
        m_p = torch.matmul(path.squeeze(1), m_p.transpose(1, 2)).transpose(1, 2)
        logs_p = torch.matmul(path.squeeze(1), logs_p.transpose(1, 2)).transpose(1, 2)
        z_p = m_p + torch.randn_like(m_p) * torch.exp(logs_p) * noise_scale
        z = self.flow(z_p, y_mask, g=g, reverse=True)
        return self.dec(z * y_mask, g=g)


def tiny_models(voice: TinyVoice) -> tuple[VitsAcoustic, Generator]:
    """The voice's modules with seeded random weights, weight norm folded, in eval mode."""
    acoustic_config, decoder_config = tiny_configs(voice)
    torch.manual_seed(voice.seed)
    acoustic, decoder = VitsAcoustic(acoustic_config), Generator(decoder_config)
    acoustic.remove_weight_norm()
    decoder.remove_weight_norm()
    with torch.no_grad():
        # Every tensor distinct, as in a trained voice (the exporter merges equal initializers: the
        # ones of fresh layer norms, the zeros of fresh flow outputs), and small prior outputs.
        for module in (acoustic, decoder):
            for parameter in module.parameters():
                parameter.add_(torch.randn_like(parameter) * 0.01)
        acoustic.enc_p.proj.weight.mul_(0.1)
        decoder.conv_post.weight.mul_(100.0)  # audible noise, not near-silence: a mel above its floor
    return acoustic.eval(), decoder.eval()


def piper_config(voice: TinyVoice) -> dict:
    """The voice's .onnx.json, as Piper writes one."""
    family, _, region = voice.language_code.partition("_")
    return {
        "audio": {"sample_rate": voice.sample_rate_hz, "quality": voice.quality},
        "espeak": {"voice": voice.espeak_voice},
        "inference": {"noise_scale": 0.667, "length_scale": 1, "noise_w": 0.8},
        "phoneme_type": "espeak",
        "phoneme_map": {},
        "phoneme_id_map": default_registry().default.phoneme_id_map(),
        "num_symbols": 256,
        "num_speakers": max(1, len(voice.speakers)),
        "speaker_id_map": {name: index for index, name in enumerate(voice.speakers)},
        "piper_version": "1.0.0",
        "language": {"code": voice.language_code, "family": family, "region": region},
        "dataset": voice.name,
    }


def export_piper_voice(voice: TinyVoice, folder: Path) -> Path:
    """Write NAME.onnx and NAME.onnx.json of `voice` into `folder`; the .onnx path."""
    acoustic, decoder = tiny_models(voice)
    graph = PiperGraph(acoustic, decoder).eval()
    tokens = 12
    example: tuple[torch.Tensor, ...] = (
        torch.randint(4, 40, (1, tokens), dtype=torch.long),
        torch.tensor([tokens], dtype=torch.long),
        torch.tensor([0.667, 1.0, 0.8]),
    )
    names = ["input", "input_lengths", "scales"]
    axes = {"input": {0: "batch", 1: "phonemes"}, "input_lengths": {0: "batch"}, "output": {0: "batch", 2: "time"}}
    if voice.speakers:
        example = (*example, torch.tensor([0], dtype=torch.long))
        names.append("sid")
        axes["sid"] = {0: "batch"}
    buffer = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            graph, example, buffer, dynamo=False, opset_version=OPSET, input_names=names, output_names=["output"],
            dynamic_axes=axes, do_constant_folding=False,
        )  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    onnx_path = folder / f"{voice.name}.onnx"
    onnx_path.write_bytes(buffer.getvalue())
    (folder / f"{voice.name}.onnx.json").write_text(json.dumps(piper_config(voice), ensure_ascii=False, indent=2), encoding="utf-8")
    return onnx_path


SHORT_BUILD = BuildConfig(
    teacher=TeacherConfig(variants_per_sentence=1),
    head=RegressionConfig(steps=4, batch_size=2, segment_frames=16, seed=1),
    adapter=RegressionConfig(steps=4, batch_size=2, segment_frames=32, seed=2),  # past twice its receptive field
    tune=DecoderTuneConfig(steps=2, batch_size=2, segment_frames=8, context_frames=4),
    max_sentences=3,
    max_heldout=2,
)
"""A build of seconds: structure, not quality."""


def build_voice(voice: TinyVoice, voices_dir: Path, work_dir: Path) -> Path:
    """`voice` exported in Piper's layout and imported into `voices_dir` with a short build; its folder."""
    onnx_path = export_piper_voice(voice, work_dir)
    return add_voice(onnx_path, voices_dir=voices_dir, config=SHORT_BUILD, threads=1, work_dir=work_dir, progress_stream=io.StringIO())
