"""Command-line flags and environment variables of every service: the single source of truth.

Each flag has an environment fallback (flag > env > default), so the same image runs from a shell
(`python -m services.gateway --port 50051`) and from a Kubernetes manifest (`TTS_PORT=50051`).
`FLAGS` lists every flag per service, so deployment files and their tests can be checked against it.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Final, Mapping, Sequence

from libs.mesh.audio_head import DEFAULT_HEAD_MS, MAX_HEAD_MS
from libs.routing.endpoints import Endpoint, EndpointParseError, parse_endpoint

SERVICES: Final[tuple[str, ...]] = ("gateway", "acoustic", "vocoder")

DEFAULT_PORTS: Final[Mapping[str, int]] = {"gateway": 50051, "acoustic": 50052, "vocoder": 50053}
DEFAULT_METRICS_PORTS: Final[Mapping[str, int]] = {"gateway": 9101, "acoustic": 9102, "vocoder": 9103}
DEFAULT_ZONE: Final = "local"
DEFAULT_THREADS: Final = 1
DEFAULT_DEVICE: Final = "cpu"
# Both workers serve in bf16 autocast, 1.5-3x faster on CPUs with AVX-512 BF16. Vocoder: DNSMOS
# within 0.01 of fp32. Acoustic: bf16 covers the flow and the mel head only (the text encoder and
# durations stay fp32, so no frame moves); DNSMOS equal to fp32 (-0.0000 +- 0.002 on 40 held-out
# sentences). A given precision is deterministic on one CPU type, and part of the model version.
DEFAULT_PRECISIONS: Final[Mapping[str, str]] = {"acoustic": "auto", "vocoder": "auto"}
# Batching measured slower than side-by-side streams on a 2-core CPU; on a GPU use e.g. 8.
DEFAULT_MAX_BATCH: Final = 1
DEFAULT_BATCH_WAIT_MS: Final = 3.0
# The vocoder is the heaviest step: two streams' steps side by side keep both cores busy whenever
# the acoustic worker idles (8 streams of mixed texts on 2 cores: 23.6 audio s/s with one, 27.0 with two).
DEFAULT_INFERENCE_THREADS: Final[Mapping[str, int]] = {"acoustic": 1, "vocoder": 2}
PRECISIONS: Final = ("auto", "fp32", "bf16")
DEFAULT_REDIS_URL: Final = "redis://127.0.0.1:6379/0"
DEFAULT_CACHE_TTL_S: Final = 300
DEFAULT_CACHE_TIMEOUT_MS: Final = 100
DEFAULT_MAX_TEXT_CHARS: Final = 5000
DEFAULT_SHUTDOWN_GRACE_S: Final = 5.0
DEFAULT_ACOUSTIC_ENDPOINTS: Final = f"{DEFAULT_ZONE}=127.0.0.1:{DEFAULT_PORTS['acoustic']}"
DEFAULT_VOCODER_ENDPOINTS: Final = f"{DEFAULT_ZONE}=127.0.0.1:{DEFAULT_PORTS['vocoder']}"


@dataclass(frozen=True)
class FlagSpec:
    """One command-line flag, its environment variable and its default."""

    flag: str
    """The long option, e.g. "--port"."""
    env: str
    """Environment variable read when the flag is absent."""
    help: str
    """What the flag sets, with its unit."""
    default: Any
    """Value used when neither flag nor env is given (for repeatable flags: a comma-separated string)."""
    parse: Callable[[str], Any] = str
    """Turns the flag's or env var's text into a value."""
    repeatable: bool = False
    """Whether the flag may be given several times (env: comma-separated)."""

    @property
    def dest(self) -> str:
        """Attribute name in the parsed namespace."""
        return self.flag.lstrip("-").replace("-", "_")


def _common_flags(service: str) -> list[FlagSpec]:
    return [
        FlagSpec("--port", "TTS_PORT", f"gRPC listen port (TCP port; default {DEFAULT_PORTS[service]})", DEFAULT_PORTS[service], int),
        FlagSpec("--host", "TTS_HOST", "address to listen on (host; default all interfaces)", "[::]"),
        FlagSpec("--zone", "TTS_ZONE", "availability zone this process runs in (name)", DEFAULT_ZONE),
        FlagSpec(
            "--metrics-port",
            "TTS_METRICS_PORT",
            f"Prometheus /metrics HTTP port (TCP port; 0 disables; default {DEFAULT_METRICS_PORTS[service]})",
            DEFAULT_METRICS_PORTS[service],
            int,
        ),
        FlagSpec("--threads", "TTS_THREADS", "CPU threads for compute (torch intra-op threads; count)", DEFAULT_THREADS, int),
        FlagSpec(
            "--shutdown-grace-s",
            "TTS_SHUTDOWN_GRACE_S",
            "time in-flight streams get to finish after SIGTERM (seconds)",
            DEFAULT_SHUTDOWN_GRACE_S,
            float,
        ),
    ]


def _worker_flags(service: str) -> list[FlagSpec]:
    return [
        FlagSpec("--device", "TTS_DEVICE", "torch device for the model, e.g. cpu or cuda (name)", DEFAULT_DEVICE),
        FlagSpec(
            "--precision",
            "TTS_PRECISION",
            f"model arithmetic: fp32 or bf16 (name; default {DEFAULT_PRECISIONS[service]})",
            DEFAULT_PRECISIONS[service],
        ),
        FlagSpec(
            "--max-batch",
            "TTS_MAX_BATCH",
            "most streams whose model steps run as one batch (count; 1 disables batching)",
            DEFAULT_MAX_BATCH,
            int,
        ),
        FlagSpec(
            "--batch-wait-ms",
            "TTS_BATCH_WAIT_MS",
            "longest a model step waits for others to join its batch (milliseconds)",
            DEFAULT_BATCH_WAIT_MS,
            float,
        ),
        FlagSpec(
            "--inference-threads",
            "TTS_INFERENCE_THREADS",
            f"threads running model steps of different streams side by side (count; at least --max-batch; "
            f"default {DEFAULT_INFERENCE_THREADS[service]})",
            DEFAULT_INFERENCE_THREADS[service],
            int,
        ),
    ]


def _gateway_flags() -> list[FlagSpec]:
    return [
        FlagSpec(
            "--acoustic",
            "TTS_ACOUSTIC",
            "acoustic worker as ZONE=HOST:PORT (repeatable; env: comma-separated)",
            DEFAULT_ACOUSTIC_ENDPOINTS,
            repeatable=True,
        ),
        FlagSpec(
            "--vocoder",
            "TTS_VOCODER",
            "vocoder worker as ZONE=HOST:PORT (repeatable; env: comma-separated)",
            DEFAULT_VOCODER_ENDPOINTS,
            repeatable=True,
        ),
        FlagSpec("--redis-url", "REDIS_URL", "Redis for the mel cache (URL; empty disables the cache)", DEFAULT_REDIS_URL),
        FlagSpec("--cache-ttl-s", "TTS_CACHE_TTL_S", "lifetime of a cached sentence mel (seconds)", DEFAULT_CACHE_TTL_S, int),
        FlagSpec(
            "--audio-head-ms",
            "TTS_AUDIO_HEAD_MS",
            "first audio of each cached sentence kept next to its mel, so a cache hit speaks at once (milliseconds; 0 keeps mel only)",
            DEFAULT_HEAD_MS,
            float,
        ),
        FlagSpec(
            "--cache-timeout-ms",
            "TTS_CACHE_TIMEOUT_MS",
            "socket timeout of each Redis call before failing open (milliseconds)",
            DEFAULT_CACHE_TIMEOUT_MS,
            int,
        ),
        FlagSpec("--max-text-chars", "TTS_MAX_TEXT_CHARS", "longest accepted request text (characters)", DEFAULT_MAX_TEXT_CHARS, int),
    ]


FLAGS: Final[Mapping[str, tuple[FlagSpec, ...]]] = {
    "gateway": tuple(_common_flags("gateway") + _gateway_flags()),
    "acoustic": tuple(_common_flags("acoustic") + _worker_flags("acoustic")),
    "vocoder": tuple(_common_flags("vocoder") + _worker_flags("vocoder")),
}
"""Every flag of every service."""


@dataclass(frozen=True)
class ServerSettings:
    """Settings every service has."""

    port: int
    """gRPC listen port."""
    host: str
    """Address to listen on."""
    zone: str
    """Availability zone of this process."""
    metrics_port: int
    """Prometheus HTTP port; 0 disables it."""
    threads: int
    """CPU threads for compute."""
    shutdown_grace_s: float
    """Seconds in-flight streams get after SIGTERM."""


@dataclass(frozen=True)
class WorkerSettings(ServerSettings):
    """Settings of an acoustic or vocoder worker."""

    device: str = DEFAULT_DEVICE
    """Torch device name."""
    precision: str = "fp32"
    """Model arithmetic, "fp32" or "bf16"."""
    max_batch: int = DEFAULT_MAX_BATCH
    """Most streams batched into one model call; 1 disables batching."""
    batch_wait_ms: float = DEFAULT_BATCH_WAIT_MS
    """Longest a model step waits for a batch to fill."""
    inference_threads: int = 1
    """Threads running model steps of different streams side by side."""


@dataclass(frozen=True)
class GatewaySettings(ServerSettings):
    """Settings of the gateway."""

    acoustic: tuple[Endpoint, ...] = field(default_factory=tuple)
    """Acoustic workers the gateway may use."""
    vocoder: tuple[Endpoint, ...] = field(default_factory=tuple)
    """Vocoder workers the gateway may use."""
    redis_url: str = DEFAULT_REDIS_URL
    """Redis URL of the mel cache; empty disables the cache."""
    cache_ttl_s: int = DEFAULT_CACHE_TTL_S
    """Lifetime of a cached sentence."""
    cache_timeout_ms: int = DEFAULT_CACHE_TIMEOUT_MS
    """Socket timeout of each Redis call."""
    audio_head_ms: float = DEFAULT_HEAD_MS
    """First audio of each sentence cached with its mel (0: mel only)."""
    max_text_chars: int = DEFAULT_MAX_TEXT_CHARS
    """Longest accepted request text."""


def build_parser(service: str, environ: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    """An argparse parser for `service` whose defaults come from `environ` (os.environ if None)."""
    if service not in FLAGS:
        raise ValueError(f"unknown service {service!r}; expected one of {', '.join(SERVICES)}")
    env = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(
        prog=f"python -m services.{service}",
        description=f"The {service} service of the TTS mesh. Every flag falls back to its environment variable.",
    )
    for spec in FLAGS[service]:
        help_text = f"{spec.help} [env {spec.env}]"
        if spec.repeatable:
            # None marks "not given", so flags replace the env list instead of appending to it.
            parser.add_argument(spec.flag, dest=spec.dest, action="append", default=None, help=help_text)
            continue
        raw = env.get(spec.env)
        try:
            default = spec.parse(raw) if raw not in (None, "") else spec.default
        except ValueError:
            parser.error(f"environment variable {spec.env}={raw!r} is not a valid value for {spec.flag}")
        parser.add_argument(spec.flag, dest=spec.dest, type=spec.parse, default=default, help=help_text)
    return parser


def _endpoints(values: Sequence[str] | None, spec: FlagSpec, env: Mapping[str, str], kind: str) -> tuple[Endpoint, ...]:
    items = list(values) if values else (env.get(spec.env) or spec.default).split(",")
    try:
        return tuple(parse_endpoint(item, kind) for item in items if item.strip())
    except EndpointParseError as error:
        raise SystemExit(f"{spec.flag}: {error}") from None


def load_settings(
    service: str, argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> WorkerSettings | GatewaySettings:
    """Parse `argv` (sys.argv[1:] if None) for `service`, with env fallbacks."""
    env = os.environ if environ is None else environ
    namespace = build_parser(service, env).parse_args(argv)
    values = vars(namespace)
    common = {name: values[name] for name in ("port", "host", "zone", "metrics_port", "threads", "shutdown_grace_s")}
    if values["threads"] < 1:
        raise SystemExit("--threads must be at least 1")
    if service != "gateway":
        if values["precision"] not in PRECISIONS:
            raise SystemExit(f"--precision must be one of {', '.join(PRECISIONS)}, got {values['precision']!r}")
        if values["max_batch"] < 1 or values["inference_threads"] < 1 or values["batch_wait_ms"] < 0:
            raise SystemExit("--max-batch and --inference-threads must be at least 1, --batch-wait-ms at least 0")
        return WorkerSettings(
            **common,
            device=values["device"],
            precision=values["precision"],
            max_batch=values["max_batch"],
            batch_wait_ms=values["batch_wait_ms"],
            # A batch can only form when that many streams can be inside a model step at once.
            inference_threads=max(values["inference_threads"], values["max_batch"]),
        )
    specs = {spec.dest: spec for spec in FLAGS["gateway"]}
    acoustic = _endpoints(values["acoustic"], specs["acoustic"], env, "acoustic")
    vocoder = _endpoints(values["vocoder"], specs["vocoder"], env, "vocoder")
    if not acoustic or not vocoder:
        raise SystemExit("the gateway needs at least one --acoustic and one --vocoder endpoint")
    if values["max_text_chars"] < 1:
        raise SystemExit("--max-text-chars must be at least 1")
    if not 0 <= values["audio_head_ms"] <= MAX_HEAD_MS:
        raise SystemExit(f"--audio-head-ms must be between 0 and {MAX_HEAD_MS:g}")
    return GatewaySettings(
        **common,
        acoustic=acoustic,
        vocoder=vocoder,
        redis_url=values["redis_url"],
        cache_ttl_s=values["cache_ttl_s"],
        cache_timeout_ms=values["cache_timeout_ms"],
        audio_head_ms=values["audio_head_ms"],
        max_text_chars=values["max_text_chars"],
    )
