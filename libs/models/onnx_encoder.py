"""The VITS text encoder (`VitsAcoustic.enc_p`) run by onnxruntime: torch's numbers, in less time.

On one CPU thread onnxruntime runs the encoder about a quarter faster than torch fp32 (161 ids:
about 26 ms against 30-39 ms; two threads: about 18 ms) and agrees with it to about 1e-5. Torch
under bf16 autocast takes about 22 ms on a CPU with AVX-512 BF16, but it is not float32, so it
moves durations. The graph is exported once
with the TorchScript exporter and cached as an .onnx file under `default_cache_dir()`, keyed by the
encoder's config and weights and the torch and onnxruntime versions. A cached file is used only
after it reproduces torch on a probe sentence; one that fails to load or disagrees is rebuilt.

Only an encoder without speaker input is exported (one graph then serves every request); a VITS2
speaker-conditioned encoder stays in torch.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import torch
from torch import nn

from libs.models.piper_import import default_cache_dir
from libs.models.vits import EncoderOutput, TextEncoder, VitsAcoustic, VitsConfig

ENCODER_CACHE_FORMAT_VERSION: Final = 1
ONNX_OPSET: Final = 17
INPUT_NAME: Final = "phoneme_ids"
OUTPUT_NAMES: Final = ("hidden", "m_p", "logs_p")
EXPORT_EXAMPLE_TOKENS: Final = 16
PROBE_TOKENS: Final = 23
PROBE_TOLERANCE: Final = 1e-4
"""Largest |onnxruntime - torch| accepted on the probe (float32 round-off is about 1e-5)."""

_log = logging.getLogger(__name__)


# The encoder runs once per sentence, on the path to its first audio. A second thread takes plan()
# from 36.7 to 28.1 ms (161 ids) when the other core is free, as it is at low load; it sleeps
# between calls, so a busy machine loses only the brief oversubscription of one step.
ENCODER_THREADS: Final = 2


def onnx_encoder_supported(config: VitsConfig) -> bool:
    """True when the text encoder takes no speaker input, so one exported graph serves every speaker."""
    return not (config.n_speakers > 1 and config.use_spk_conditioned_encoder)


class _WholeSequenceEncoder(nn.Module):
    """enc_p on one unpadded sentence: ids [1, tokens] -> (hidden, m_p, logs_p); the mask is all ones."""

    def __init__(self, encoder: TextEncoder) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        lengths = torch.full((1,), ids.size(1), dtype=torch.long)
        hidden, m_p, logs_p, _ = self.encoder(ids, lengths)
        return hidden, m_p, logs_p


def export_text_encoder(acoustic: VitsAcoustic) -> bytes:
    """The text encoder of `acoustic` as a serialised ONNX model with a dynamic token axis."""
    if not onnx_encoder_supported(acoustic.config):
        raise ValueError("this voice's text encoder is speaker-conditioned; run it in torch")
    # The exporter ends by calling train(wrapper.training) on the whole tree: a wrapper left in its
    # default training mode would switch the caller's encoder (and its dropout) on.
    wrapper = _WholeSequenceEncoder(acoustic.enc_p).eval()
    example = torch.ones(1, EXPORT_EXAMPLE_TOKENS, dtype=torch.long)
    token_axis = {INPUT_NAME: {1: "tokens"}} | {name: {2: "tokens"} for name in OUTPUT_NAMES}
    buffer = io.BytesIO()
    # The legacy exporter announces its deprecation and notes slices it cannot fold; both are expected.
    # A caller's bf16 autocast must not leak into the float32 graph.
    with warnings.catch_warnings(), torch.no_grad(), torch.autocast("cpu", enabled=False):
        warnings.simplefilter("ignore")
        torch.onnx.export(
            wrapper,
            (example,),
            buffer,
            dynamo=False,  # the dynamo exporter needs onnxscript, which is not a dependency
            opset_version=ONNX_OPSET,
            training=torch.onnx.TrainingMode.EVAL,
            input_names=[INPUT_NAME],
            output_names=list(OUTPUT_NAMES),
            dynamic_axes=token_axis,
        )
    return buffer.getvalue()


def encoder_cache_key(acoustic: VitsAcoustic) -> str:
    """Hex digest of everything the exported graph depends on: config, weights, torch and onnxruntime."""
    import onnxruntime

    digest = hashlib.sha256()
    header = (ENCODER_CACHE_FORMAT_VERSION, ONNX_OPSET, torch.__version__, onnxruntime.__version__, acoustic.config.to_dict())
    digest.update(repr(header).encode("utf-8"))
    for name, tensor in sorted(acoustic.enc_p.state_dict().items()):
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode("utf-8"))
        digest.update(tensor.detach().to("cpu", torch.float32).contiguous().numpy())
    return digest.hexdigest()


def encoder_cache_path(acoustic: VitsAcoustic, cache_dir: str | Path | None = None) -> Path:
    """Where the exported encoder of `acoustic` is cached (default folder: `default_cache_dir()`)."""
    folder = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    return folder / f"text-encoder-{encoder_cache_key(acoustic)[:32]}.v{ENCODER_CACHE_FORMAT_VERSION}.onnx"


def cpu_session(model: str | Path | bytes, threads: int = ENCODER_THREADS) -> Any:
    """An onnxruntime session on `threads` CPU threads that sleep, rather than spin, between calls.

    The worker shares its cores with other services: a spinning idle thread would burn one.
    """
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    source = model if isinstance(model, bytes) else str(model)
    return onnxruntime.InferenceSession(source, options, providers=["CPUExecutionProvider"])


@dataclass
class OnnxTextEncoder:
    """`VitsAcoustic.encode` for one unpadded sentence of a voice whose encoder has no speaker input."""

    session: Any
    """The onnxruntime InferenceSession (thread-safe: concurrent `encode` calls may share it)."""
    cache_path: Path
    """The .onnx file the session was built from (or would have been, when the cache is not writable)."""
    exported: bool
    """True when this load exported the graph; False when it came from the cache."""

    @classmethod
    def load(cls, acoustic: VitsAcoustic, cache_dir: str | Path | None = None) -> "OnnxTextEncoder":
        """The encoder of `acoustic`, from the cache when a good copy is there, else exported (and cached)."""
        if acoustic.enc_p.training:
            raise ValueError("the text encoder is in training mode (dropout on): call .eval() before exporting it")
        path = encoder_cache_path(acoustic, cache_dir)
        if path.exists():
            session = _cached_session(path, acoustic)
            if session is not None:
                return cls(session, path, exported=False)
        model = export_text_encoder(acoustic)
        session = cpu_session(model)
        error = _probe_error(session, acoustic)
        if error > PROBE_TOLERANCE:
            raise RuntimeError(f"the exported text encoder differs from torch by {error:.2e} (> {PROBE_TOLERANCE})")
        _write_cache(path, model)
        return cls(session, path, exported=True)

    def encode(self, phoneme_ids: torch.Tensor) -> EncoderOutput:
        """ids [1, tokens] (int64, CPU) -> the `EncoderOutput` torch gives: float32, full mask, g None."""
        if phoneme_ids.dim() == 1:
            phoneme_ids = phoneme_ids.unsqueeze(0)
        if phoneme_ids.size(0) != 1:
            raise ValueError(f"the onnxruntime encoder takes one sentence at a time, got a batch of {phoneme_ids.size(0)}")
        tokens = phoneme_ids.size(1)
        feeds = {INPUT_NAME: phoneme_ids.to(torch.long).numpy()}
        hidden, m_p, logs_p = (torch.from_numpy(output) for output in self.session.run(list(OUTPUT_NAMES), feeds))
        x_mask = torch.ones(1, 1, tokens)
        lengths = torch.full((1,), tokens, dtype=torch.long)
        return EncoderOutput(hidden, m_p, logs_p, x_mask, lengths, None)


def _cached_session(path: Path, acoustic: VitsAcoustic) -> Any | None:
    """A session from the cached file, or None when the file is unreadable or disagrees with torch."""
    try:
        session = cpu_session(path)
        error = _probe_error(session, acoustic)
    except Exception as failure:  # noqa: BLE001 - whatever is wrong with the file, re-exporting fixes it
        _log.warning("cached text encoder %s does not load (%s); exporting it again", path, failure)
        return None
    if error > PROBE_TOLERANCE:
        _log.warning("cached text encoder %s differs from torch by %.2e; exporting it again", path, error)
        return None
    return session


def _probe_error(session: Any, acoustic: VitsAcoustic) -> float:
    """Largest |onnxruntime - torch| over the three outputs for a fixed probe sentence."""
    ids = (torch.arange(PROBE_TOKENS, dtype=torch.long) * 7 % acoustic.config.n_vocab).unsqueeze(0)
    with torch.no_grad(), torch.autocast("cpu", enabled=False):
        reference = acoustic.enc_p(ids, torch.full((1,), PROBE_TOKENS, dtype=torch.long))[:3]
    outputs = session.run(list(OUTPUT_NAMES), {INPUT_NAME: ids.numpy()})
    return max(float(np.abs(output - expected.numpy()).max()) for output, expected in zip(outputs, reference))


def _write_cache(path: Path, model: bytes) -> None:
    """Save the exported model; a cache that cannot be written costs the next start an export, nothing more."""
    # Write then rename, so a crash or a concurrent loader never sees half a file.
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_bytes(model)
        os.replace(partial, path)
    except OSError as failure:
        with contextlib.suppress(OSError):
            partial.unlink()
        _log.warning("could not cache the text encoder at %s (%s); it will be exported again next start", path, failure)
