"""The VITS text encoder (`VitsAcoustic.enc_p`) and stochastic duration predictor run by onnxruntime.

On a CPU onnxruntime runs the encoder faster than torch fp32 and agrees with it to about 1e-5 (what
it gained: docs/performance.md, "History"). Torch under bf16 autocast is faster still where the CPU
has native bf16, but it is not float32, so it moves durations. Each graph is
exported once with the TorchScript exporter and cached as an .onnx file under `default_cache_dir()`,
keyed by the config and weights it holds and the torch and onnxruntime versions. A cached file is
used only after it reproduces torch on a probe sentence; one that fails to load or disagrees is
rebuilt.

Two graphs:

- `OnnxFrontEnd`, for a single-speaker voice with a stochastic duration predictor (the default
  voice): phoneme ids and the duration noise in, the prior (m_p, logs_p) and the log-durations out.
  Encoder and predictor are one graph, so a sentence's text side is one call on one thread pool.
- `OnnxTextEncoder` (float32): just the encoder, for a voice whose durations stay in torch
  (speaker-conditioned or deterministic predictor). A VITS2 speaker-conditioned encoder has no
  graph at all and stays in torch.

One graph on threads that spin during a call (`wide_session`) is faster than two graphs on threads
that sleep between operators, which is why the encoder and the predictor are one graph.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import logging
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import torch
from torch import nn

from libs.models.onnx_providers import ExecutionProviderError, execution_providers, inference_session
from libs.models.piper_import import INFERENCE_UNUSED_PREFIXES, default_cache_dir
from libs.models.vits import DEFAULT_NOISE_W, EncoderOutput, StochasticDurationPredictor, TextEncoder, VitsAcoustic, VitsConfig

ENCODER_CACHE_FORMAT_VERSION: Final = 2
"""Part of every cached graph's key and file name: bump it when an export changes."""
ONNX_OPSET: Final = 17
INPUT_NAME: Final = "phoneme_ids"
OUTPUT_NAMES: Final = ("hidden", "m_p", "logs_p")
FRONT_END_INPUT_NAMES: Final = ("phoneme_ids", "noise")
FRONT_END_OUTPUT_NAMES: Final = ("m_p", "logs_p", "logw")
EXPORT_EXAMPLE_TOKENS: Final = 16
PROBE_TOKENS: Final = 23
PROBE_TOLERANCE: Final = 1e-4
"""Largest |onnxruntime - torch| accepted on the probe (float32 round-off is about 1e-5)."""

_log = logging.getLogger(__name__)


# The text side of a request's first sentence is on the path to its first audio, and when the worker
# has nothing else to do the rest of the mesh is mostly idle too: a graph's `wide_session` then runs
# it on both cores. Its threads spin between operators during a call (a sleeping thread woken for
# each of ~100 operators gains nothing over one thread) and stop at the end of the call, so they
# never burn a core between sentences. Under load the second thread only takes CPU from other
# streams and lowers throughput, so `session` runs on one.
WIDE_THREADS: Final = 2


def onnx_encoder_supported(config: VitsConfig) -> bool:
    """True when the text encoder takes no speaker input, so one exported graph serves every speaker."""
    return not (config.n_speakers > 1 and config.use_spk_conditioned_encoder)


def onnx_durations_supported(config: VitsConfig) -> bool:
    """True for a stochastic duration predictor without speaker input (a single-speaker voice)."""
    return config.duration_predictor == "stochastic" and config.n_speakers <= 1


class _WholeSequenceEncoder(nn.Module):
    """enc_p on one unpadded sentence: ids [1, tokens] -> (hidden, m_p, logs_p); the mask is all ones."""

    def __init__(self, encoder: TextEncoder) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        lengths = torch.full((1,), ids.size(1), dtype=torch.long)
        hidden, m_p, logs_p, _ = self.encoder(ids, lengths)
        return hidden, m_p, logs_p


class _WholeSequenceFrontEnd(nn.Module):
    """enc_p then dp.sample_log_durations on one unpadded sentence:
    (ids [1, tokens], noise [1, 2, tokens]) -> (m_p, logs_p, logw [1, 1, tokens])."""

    def __init__(self, encoder: TextEncoder, predictor: StochasticDurationPredictor) -> None:
        super().__init__()
        self.encoder = _WholeSequenceEncoder(encoder)
        self.predictor = predictor

    def forward(self, ids: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        hidden, m_p, logs_p = self.encoder(ids)
        x_mask = torch.ones_like(hidden[:, :1])
        return m_p, logs_p, self.predictor.sample_log_durations(hidden, x_mask, noise)


def export_text_encoder(acoustic: VitsAcoustic) -> bytes:
    """The text encoder of `acoustic` as a serialised ONNX model with a dynamic token axis."""
    if not onnx_encoder_supported(acoustic.config):
        raise ValueError("this voice's text encoder is speaker-conditioned; run it in torch")
    example = (torch.ones(1, EXPORT_EXAMPLE_TOKENS, dtype=torch.long),)
    return export_graph(_WholeSequenceEncoder(acoustic.enc_p), example, (INPUT_NAME,), OUTPUT_NAMES)


def export_front_end(acoustic: VitsAcoustic) -> bytes:
    """Encoder + stochastic duration predictor of `acoustic` as one serialised ONNX model."""
    if not onnx_durations_supported(acoustic.config):
        raise ValueError("this voice's duration predictor is deterministic or speaker-conditioned; run it in torch")
    example = (torch.ones(1, EXPORT_EXAMPLE_TOKENS, dtype=torch.long), torch.zeros(1, 2, EXPORT_EXAMPLE_TOKENS))
    return export_graph(_WholeSequenceFrontEnd(acoustic.enc_p, acoustic.dp), example, FRONT_END_INPUT_NAMES, FRONT_END_OUTPUT_NAMES)


def export_graph(
    module: nn.Module,
    example: tuple[torch.Tensor, ...],
    input_names: tuple[str, ...],
    output_names: tuple[str, ...],
    dynamic_axes: dict[str, dict[int, str]] | None = None,
) -> bytes:
    """`module` as ONNX: by default every input and output dynamic in its last (token) axis, else
    just the `dynamic_axes` given (name -> {axis: symbol})."""
    # The exporter ends by calling train(wrapper.training) on the whole tree: a wrapper left in its
    # default training mode would switch the caller's model (and its dropout) on.
    wrapper = module.eval()
    if dynamic_axes is None:
        token_axes = {name: {tensor.dim() - 1: "tokens"} for name, tensor in zip(input_names, example, strict=False)}
        # Every output of the text side is [1, channels, tokens].
        token_axes |= {name: {2: "tokens"} for name in output_names}
    else:
        token_axes = dynamic_axes
    buffer = io.BytesIO()
    # The legacy exporter announces its deprecation and notes slices it cannot fold; both are expected.
    # A caller's bf16 autocast must not leak into the float32 graph.
    with warnings.catch_warnings(), torch.no_grad(), torch.autocast("cpu", enabled=False):
        warnings.simplefilter("ignore")
        torch.onnx.export(
            wrapper,
            example,
            buffer,
            dynamo=False,  # the dynamo exporter needs onnxscript, which is not a dependency
            opset_version=ONNX_OPSET,
            training=torch.onnx.TrainingMode.EVAL,
            input_names=list(input_names),
            output_names=list(output_names),
            dynamic_axes=token_axes,
        )
    return buffer.getvalue()


def encoder_cache_key(acoustic: VitsAcoustic) -> str:
    """Hex digest of everything the exported encoder depends on: config, weights, torch and onnxruntime."""
    return _cache_key(acoustic, "enc_p.")


def encoder_cache_path(acoustic: VitsAcoustic, cache_dir: str | Path | None = None) -> Path:
    """Where the exported encoder of `acoustic` is cached (default folder: `default_cache_dir()`)."""
    return _cache_path("text-encoder", encoder_cache_key(acoustic), cache_dir)


def front_end_cache_path(acoustic: VitsAcoustic, cache_dir: str | Path | None = None) -> Path:
    """Where the exported front end (encoder + duration predictor) of `acoustic` is cached."""
    return _cache_path("front-end", _cache_key(acoustic, ("enc_p.", "dp.")), cache_dir)


def _cache_key(acoustic: VitsAcoustic, prefix: str | tuple[str, ...]) -> str:
    """Hex digest of the voice's config, the weights under `prefix` and the torch and onnxruntime versions."""
    import onnxruntime

    digest = hashlib.sha256()
    header = (ENCODER_CACHE_FORMAT_VERSION, ONNX_OPSET, torch.__version__, onnxruntime.__version__, acoustic.config.to_dict())
    digest.update(repr(header).encode("utf-8"))
    # The duration predictor's training-only modules keep their random initial values in an imported
    # Piper voice: hashing them would give every process its own key. The graph does not use them.
    weights = {name: tensor for name, tensor in acoustic.state_dict().items() if name.startswith(prefix)}
    for name, tensor in sorted(weights.items()):
        if name.startswith(INFERENCE_UNUSED_PREFIXES):
            continue
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(tensor.detach().to("cpu", torch.float32).contiguous().numpy())
    return digest.hexdigest()


def _cache_path(stem: str, key: str, cache_dir: str | Path | None) -> Path:
    folder = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    return folder / f"{stem}-{key[:32]}.v{ENCODER_CACHE_FORMAT_VERSION}.onnx"


@functools.cache
def arena_shrinking_run() -> Any:
    """onnxruntime run options that hand the CPU arena's unused memory back when the call ends.

    An arena keeps what its largest call needed, so one very long sentence would hold a worker's
    memory at its peak for good. With these options the memory comes back after the call, and an
    ordinary call takes as long as without them, so every call of the text side uses them; the
    streamed steps use them after their wide steps only (`SHRINK_FROM_FRAMES`).
    """
    import onnxruntime

    options = onnxruntime.RunOptions()
    options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    return options


def graph_session(model: str | Path | bytes, threads: int = 1, device: str | torch.device = "cpu") -> Any:
    """An onnxruntime session on the providers of `device` (`execution_providers`), on `threads` CPU
    threads that spin only while a call runs.

    The worker shares its cores with other services: a thread spinning between calls would burn one.
    """
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "1")
    options.add_session_config_entry("session.force_spinning_stop", "1")
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    return inference_session(model, options, device)


@dataclass
class _CachedGraph:
    """An onnxruntime session on a graph exported from torch and cached on disk."""

    session: Any
    """The onnxruntime InferenceSession on one thread (thread-safe: concurrent calls may share it)."""
    wide_session: Any
    """The same graph on `WIDE_THREADS` threads, for a call that may have the machine to itself."""
    cache_path: Path
    """The .onnx file the session was built from (or would have been, when the cache is not writable)."""
    exported: bool
    """True when this load exported the graph; False when it came from the cache."""

    @classmethod
    def _load(
        cls,
        module: nn.Module,
        path: Path,
        export: Callable[[], bytes],
        probe_error: Callable[[Any], float],
        what: str,
        device: str | torch.device,
    ) -> Any:
        """The graph of `module` on `device` from the cached file at `path` when it loads and passes
        the probe, else exported (and cached)."""
        if module.training:
            raise ValueError(f"the {what} is in training mode (dropout on): call .eval() before exporting it")
        execution_providers(device)  # a device onnxruntime cannot run on fails here, before any export
        session, source, exported = load_cached_session(
            path, export, probe_error, what, lambda source: graph_session(source, 1, device)
        )
        return cls(session, graph_session(source, WIDE_THREADS, device), path, exported)

    def _session(self, wide: bool) -> Any:
        return self.wide_session if wide else self.session


class OnnxTextEncoder(_CachedGraph):
    """`VitsAcoustic.encode` for one unpadded sentence of a voice whose encoder has no speaker input."""

    @classmethod
    def load(
        cls, acoustic: VitsAcoustic, cache_dir: str | Path | None = None, device: str | torch.device = "cpu"
    ) -> OnnxTextEncoder:
        """The encoder of `acoustic` on onnxruntime's providers for `device`, from the cache when a
        good copy is there, else exported (and cached)."""
        return cls._load(
            acoustic.enc_p,
            encoder_cache_path(acoustic, cache_dir),
            lambda: export_text_encoder(acoustic),
            lambda candidate: _encoder_probe_error(candidate, acoustic),
            "text encoder",
            device,
        )

    def encode(self, phoneme_ids: torch.Tensor, wide: bool = False) -> EncoderOutput:
        """ids [1, tokens] (int64, CPU) -> the `EncoderOutput` torch gives: float32, full mask, g None.
        `wide` runs it on `WIDE_THREADS` threads."""
        if phoneme_ids.dim() == 1:
            phoneme_ids = phoneme_ids.unsqueeze(0)
        if phoneme_ids.size(0) != 1:
            raise ValueError(f"the onnxruntime encoder takes one sentence at a time, got a batch of {phoneme_ids.size(0)}")
        tokens = phoneme_ids.size(1)
        feeds = {INPUT_NAME: phoneme_ids.to(torch.long).numpy()}
        outputs = self._session(wide).run(list(OUTPUT_NAMES), feeds, arena_shrinking_run())
        hidden, m_p, logs_p = (torch.from_numpy(output) for output in outputs)
        x_mask = torch.ones(1, 1, tokens)
        lengths = torch.full((1,), tokens, dtype=torch.long)
        return EncoderOutput(hidden, m_p, logs_p, x_mask, lengths, None)


class OnnxFrontEnd(_CachedGraph):
    """Encoder + `StochasticDurationPredictor.sample_log_durations` for one unpadded sentence of a
    single-speaker voice."""

    @classmethod
    def load(
        cls, acoustic: VitsAcoustic, cache_dir: str | Path | None = None, device: str | torch.device = "cpu"
    ) -> OnnxFrontEnd:
        """The front end of `acoustic` on onnxruntime's providers for `device`, from the cache when a
        good copy is there, else exported (and cached)."""
        return cls._load(
            acoustic,
            front_end_cache_path(acoustic, cache_dir),
            lambda: export_front_end(acoustic),
            lambda candidate: _front_end_probe_error(candidate, acoustic),
            "front end",
            device,
        )

    def run(self, phoneme_ids: torch.Tensor, noise: torch.Tensor, wide: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(m_p, logs_p, logw), float32, from ids [1, tokens] (int64, CPU) and noise [1, 2, tokens]
        already scaled by noise_w; `wide` runs it on `WIDE_THREADS` threads."""
        if phoneme_ids.dim() == 1:
            phoneme_ids = phoneme_ids.unsqueeze(0)
        tokens = phoneme_ids.size(1)
        if phoneme_ids.size(0) != 1 or noise.shape != (1, 2, tokens):
            raise ValueError(f"one sentence at a time: ids {tuple(phoneme_ids.shape)} need noise [1, 2, tokens], got {tuple(noise.shape)}")
        feeds = {
            FRONT_END_INPUT_NAMES[0]: phoneme_ids.to(torch.long).numpy(),
            FRONT_END_INPUT_NAMES[1]: noise.to(torch.float32).contiguous().numpy(),
        }
        outputs = self._session(wide).run(list(FRONT_END_OUTPUT_NAMES), feeds, arena_shrinking_run())
        m_p, logs_p, logw = (torch.from_numpy(output) for output in outputs)
        return m_p, logs_p, logw


def load_cached_session(
    path: Path,
    export: Callable[[], bytes],
    probe_error: Callable[[Any], float],
    what: str,
    new_session: Callable[[str | Path | bytes], Any] = graph_session,
) -> tuple[Any, Path | bytes, bool]:
    """(session made by `new_session`, the file or bytes it was built from, exported): from the
    cached file at `path` when it loads and passes the probe, else exported and cached."""
    if path.exists():
        session = _cached_session(path, probe_error, what, new_session)
        if session is not None:
            return session, path, False
    model = export()
    session = new_session(model)
    error = probe_error(session)
    if error > PROBE_TOLERANCE:
        raise RuntimeError(f"the exported {what} differs from torch by {error:.2e} (> {PROBE_TOLERANCE})")
    _write_cache(path, model, what)
    return session, model, True


def _cached_session(
    path: Path, probe_error: Callable[[Any], float], what: str, new_session: Callable[[str | Path | bytes], Any]
) -> Any | None:
    """A session from the cached file, or None when the file is unreadable or disagrees with torch."""
    try:
        session = new_session(path)
        error = probe_error(session)
    except ExecutionProviderError:
        raise  # the device is at fault, not the file: exporting again would not help
    except Exception as failure:
        _log.warning("cached %s %s does not load (%s); exporting it again", what, path, failure)
        return None
    if error > PROBE_TOLERANCE:
        _log.warning("cached %s %s differs from torch by %.2e; exporting it again", what, path, error)
        return None
    return session


def _probe_ids(acoustic: VitsAcoustic) -> torch.Tensor:
    return (torch.arange(PROBE_TOKENS, dtype=torch.long) * 7 % acoustic.config.n_vocab).unsqueeze(0)


def _encoder_probe_error(session: Any, acoustic: VitsAcoustic) -> float:
    """Largest |onnxruntime - torch| over the three outputs for a fixed probe sentence."""
    ids = _probe_ids(acoustic)
    with torch.no_grad(), torch.autocast("cpu", enabled=False):
        reference = acoustic.enc_p(ids, torch.full((1,), PROBE_TOKENS, dtype=torch.long))[:3]
    outputs = session.run(list(OUTPUT_NAMES), {INPUT_NAME: ids.numpy()})
    return max(float(np.abs(output - expected.numpy()).max()) for output, expected in zip(outputs, reference, strict=False))


def _front_end_probe_error(session: Any, acoustic: VitsAcoustic) -> float:
    """Largest |onnxruntime - torch| over the front end's outputs for the probe sentence and fixed noise."""
    ids = _probe_ids(acoustic)
    # A fixed generator: the probe must not consume the global random stream.
    noise = torch.randn(1, 2, PROBE_TOKENS, generator=torch.Generator().manual_seed(0)) * DEFAULT_NOISE_W
    x_mask = torch.ones(1, 1, PROBE_TOKENS)
    with torch.no_grad(), torch.autocast("cpu", enabled=False):
        hidden, m_p, logs_p, _ = acoustic.enc_p(ids, torch.full((1,), PROBE_TOKENS, dtype=torch.long))
        reference = (m_p, logs_p, acoustic.dp.sample_log_durations(hidden, x_mask, noise))
    outputs = session.run(list(FRONT_END_OUTPUT_NAMES), {FRONT_END_INPUT_NAMES[0]: ids.numpy(), FRONT_END_INPUT_NAMES[1]: noise.numpy()})
    return max(float(np.abs(output - expected.numpy()).max()) for output, expected in zip(outputs, reference, strict=False))


def _write_cache(path: Path, model: bytes, what: str) -> None:
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
        _log.warning("could not cache the %s at %s (%s); it will be exported again next start", what, path, failure)
