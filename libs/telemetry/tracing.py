"""OpenTelemetry tracing for the mesh: SDK setup from OTEL_* env vars, gRPC interceptors, span helpers.

One client request is one trace. The gateway's server span is the root; every call it makes to a
worker carries W3C trace context (`traceparent`, `tracestate`) in gRPC metadata, and the worker's
server span continues that trace. Streams (unary-stream and bidirectional) are covered too: the
client span lasts until the call finishes, whether the caller iterates, uses `read()`/`write()`, or
cancels it.

Configuration, all from the standard variables:

- `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`): spans go to this OTLP/gRPC
  collector. Unset: no exporter, spans are dropped (tracing costs next to nothing).
- `OTEL_TRACES_EXPORTER`: `otlp`, `console` or `none`, overriding the rule above.
- `OTEL_TRACES_SAMPLER` / `OTEL_TRACES_SAMPLER_ARG`: default here `parentbased_traceidratio` with
  ratio 0.01, i.e. the gateway keeps 1 request in 100 and the workers follow the gateway's decision.
- `OTEL_SDK_DISABLED=true`: no SDK at all.

We write the interceptors ourselves rather than use opentelemetry-instrumentation-grpc 0.66b2: its
asyncio server interceptor iterates every streaming handler with `async for`, which breaks handlers
written with the `context.read()`/`context.write()` API (they are coroutines), and its streaming
client interceptor replaces the call object by a generator, so the span never ends for a call that
is cancelled or read with `read()`.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

import grpc
import grpc.aio
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.propagators.textmap import Getter, Setter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    ParentBased,
    Sampler,
    TraceIdRatioBased,
)
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

DEFAULT_SAMPLER: Final = "parentbased_traceidratio"
DEFAULT_SAMPLE_RATIO: Final = 0.01
TRACER_NAME: Final = "tts_mesh"
SERVICE_NAMESPACE: Final = "tts"

SAMPLERS: Final[tuple[str, ...]] = (
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
)
EXPORTERS: Final[tuple[str, ...]] = ("otlp", "console", "none")

# Span names of the gateway's steps (one span per step per sentence).
SPAN_NORMALISE: Final = "tts.normalise"
SPAN_PHONEMISE: Final = "tts.phonemise"
SPAN_CACHE_LOOKUP: Final = "tts.cache.lookup"
SPAN_CACHE_WRITE: Final = "tts.cache.write"
SPAN_ATTEMPT: Final = "tts.attempt"
# Span names of the workers' steps (their streams are the SERVER spans of the interceptor).
SPAN_ACOUSTIC_PLAN: Final = "tts.acoustic.plan"
SPAN_ACOUSTIC_CHUNK: Final = "tts.acoustic.chunk"
SPAN_VOCODER_STEP: Final = "tts.vocoder.step"

UNTRACED_METHOD_PREFIXES: Final[tuple[str, ...]] = ("/grpc.health.v1.Health/",)
"""RPCs never traced: health checks and watches run every second and belong to no request."""

# Attribute keys.
ATTR_ZONE: Final = "tts.zone"
ATTR_WORKER: Final = "tts.worker"
ATTR_ATTEMPT: Final = "tts.attempt"
ATTR_REASON: Final = "tts.reason"
ATTR_SENTENCE_INDEX: Final = "tts.sentence_index"
ATTR_CACHE_HIT: Final = "tts.cache.hit"
ATTR_VOICE: Final = "tts.voice"
ATTR_PHONEME_COUNT: Final = "tts.phoneme_count"
ATTR_TIME_TO_FIRST_AUDIO_S: Final = "tts.time_to_first_audio_s"
ATTR_GRPC_STATUS_CODE: Final = "rpc.grpc.status_code"
# A worker's model step (libs.scheduling.runner): where it ran and how it was scheduled.
ATTR_STEP_UNITS: Final = "tts.step.units"
"""Its size: phoneme ids for a plan, mel frames for a chunk or a vocoder step."""
ATTR_STEP_LANE: Final = "tts.step.lane"
"""The lane of the inference thread that ran it: urgent, first (first audios) or background (libs.scheduling.costs)."""
ATTR_STEP_STARTING: Final = "tts.step.starting"
"""Whether it went with first audios (its stream had not yet started playing)."""
ATTR_STEP_QUEUED_S: Final = "tts.step.queued_s"
"""Seconds it waited for a thread."""
ATTR_STEP_SLACK_S: Final = "tts.step.slack_s"
"""Seconds to spare at its start: its latest start (its listener's deadline less its expected lead)
less when it started. Negative: it started late, and its listener runs dry unless audio it already
holds covers the difference. Only on steps scheduled by deadline."""
ATTR_STEP_CPU_S: Final = "tts.step.cpu_s"
"""CPU seconds of the thread that ran it."""


@dataclass(frozen=True)
class TracingConfig:
    """How a service traces: read from the standard OTEL_* environment variables."""

    service_name: str
    """`service.name` resource attribute, e.g. "gateway"."""
    zone: str = "local"
    """Availability zone, written as the `cloud.availability_zone` resource attribute."""
    sampler: str = DEFAULT_SAMPLER
    """Sampler name as OTEL_TRACES_SAMPLER spells it."""
    sample_ratio: float = DEFAULT_SAMPLE_RATIO
    """Fraction of new traces kept by the ratio samplers (OTEL_TRACES_SAMPLER_ARG), 0 to 1."""
    exporter: str = "none"
    """Where spans go: "otlp", "console" or "none"."""
    otlp_endpoint: str = ""
    """OTLP/gRPC collector URL, e.g. "http://otel-collector:4317" (http: plaintext, https: TLS)."""
    disabled: bool = False
    """OTEL_SDK_DISABLED: no SDK, every span is a no-op."""

    @classmethod
    def from_env(cls, service_name: str, zone: str = "local", environ: Mapping[str, str] | None = None) -> TracingConfig:
        """Read the config from `environ` (os.environ if None); raise ValueError on a bad value."""
        env = os.environ if environ is None else environ
        sampler = (env.get("OTEL_TRACES_SAMPLER") or DEFAULT_SAMPLER).strip().lower()
        if sampler not in SAMPLERS:
            raise ValueError(f"OTEL_TRACES_SAMPLER={sampler!r} is not supported; use one of {', '.join(SAMPLERS)}")
        raw_ratio = (env.get("OTEL_TRACES_SAMPLER_ARG") or "").strip()
        try:
            ratio = float(raw_ratio) if raw_ratio else DEFAULT_SAMPLE_RATIO
        except ValueError:
            raise ValueError(f"OTEL_TRACES_SAMPLER_ARG={raw_ratio!r} is not a number; give a ratio from 0 to 1") from None
        if not 0.0 <= ratio <= 1.0:
            raise ValueError(f"OTEL_TRACES_SAMPLER_ARG={ratio} is outside 0..1; give a ratio such as 0.01")
        endpoint = (env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or "").strip()
        exporter = (env.get("OTEL_TRACES_EXPORTER") or ("otlp" if endpoint else "none")).strip().lower()
        if exporter not in EXPORTERS:
            raise ValueError(f"OTEL_TRACES_EXPORTER={exporter!r} is not supported; use one of {', '.join(EXPORTERS)}")
        protocol = (env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "grpc").strip()
        if exporter == "otlp" and protocol != "grpc":
            raise ValueError(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: only 'grpc' is installed; point it at the collector's gRPC port (4317)")
        disabled = (env.get("OTEL_SDK_DISABLED") or "").strip().lower() == "true"
        if exporter == "otlp" and not endpoint:
            endpoint = "http://localhost:4317"  # the OTLP default, as the SDK would use
        return cls(service_name, zone, sampler, ratio, exporter, endpoint, disabled)

    def build_sampler(self) -> Sampler:
        """The SDK sampler this config names."""
        ratio = TraceIdRatioBased(self.sample_ratio)
        root = {"always_on": ALWAYS_ON, "always_off": ALWAYS_OFF, "traceidratio": ratio}
        if self.sampler in root:
            return root[self.sampler]
        return ParentBased(root[self.sampler.removeprefix("parentbased_")])


def setup_tracing(
    service_name: str,
    zone: str = "local",
    environ: Mapping[str, str] | None = None,
    exporter: SpanExporter | None = None,
    set_global: bool = True,
) -> trace.TracerProvider:
    """Build this process's tracer provider from OTEL_* env vars and (by default) install it globally.

    `exporter`, when given, replaces the env-chosen exporter (tests pass an in-memory one). The
    global provider can be set once per process; services call this once at start-up.
    """
    config = TracingConfig.from_env(service_name, zone, environ)
    if config.disabled:
        provider: trace.TracerProvider = trace.NoOpTracerProvider()
    else:
        resource = Resource.create(
            {
                "service.name": config.service_name,
                "service.namespace": SERVICE_NAMESPACE,
                "cloud.availability_zone": config.zone,
            }
        )
        sdk_provider = TracerProvider(resource=resource, sampler=config.build_sampler())
        chosen = exporter if exporter is not None else _exporter_from_config(config)
        if chosen is not None:
            sdk_provider.add_span_processor(BatchSpanProcessor(chosen))
        provider = sdk_provider
    if set_global:
        trace.set_tracer_provider(provider)
    return provider


def _exporter_from_config(config: TracingConfig) -> SpanExporter | None:
    if config.exporter == "otlp":
        # Imported here so a process without a collector never loads the exporter's gRPC stubs.
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        # Headers, certificates and timeout still come from OTEL_EXPORTER_OTLP_* in os.environ.
        return OTLPSpanExporter(endpoint=config.otlp_endpoint)
    if config.exporter == "console":
        return ConsoleSpanExporter()
    return None


def shutdown_tracing(provider: trace.TracerProvider | None = None) -> None:
    """Flush and stop span export (call on graceful shutdown so the last spans are not lost)."""
    chosen = provider if provider is not None else trace.get_tracer_provider()
    shutdown = getattr(chosen, "shutdown", None)
    if callable(shutdown):
        shutdown()


@functools.lru_cache(maxsize=16)
def get_tracer(tracer_provider: trace.TracerProvider | None = None) -> trace.Tracer:
    """The mesh's tracer from `tracer_provider` (the global provider if None), made once per provider:
    `trace.get_tracer` makes a new one at every call, which took half the time of a step span that
    the sampler drops, and every model step has one. Before the global provider is set, the tracer is
    OpenTelemetry's proxy, which follows it once it is (and it is set once)."""
    return trace.get_tracer(TRACER_NAME, tracer_provider=tracer_provider)


# --- W3C trace context in gRPC metadata -------------------------------------------------------


class _MetadataGetter(Getter[Sequence[tuple[str, Any]]]):
    def get(self, carrier: Sequence[tuple[str, Any]], key: str) -> list[str] | None:
        values = [value for name, value in carrier if name == key and isinstance(value, str)]
        return values or None

    def keys(self, carrier: Sequence[tuple[str, Any]]) -> list[str]:
        return [name for name, _ in carrier]


class _MetadataSetter(Setter[grpc.aio.Metadata]):
    def set(self, carrier: grpc.aio.Metadata, key: str, value: str) -> None:
        carrier[key] = value


_GETTER: Final = _MetadataGetter()
_SETTER: Final = _MetadataSetter()

# The server span of the RPC being handled, so helpers deep in a handler can annotate the request.
_REQUEST_SPAN: contextvars.ContextVar[Span | None] = contextvars.ContextVar("tts_request_span", default=None)


def _untraced(full_method: str) -> bool:
    return full_method.startswith(UNTRACED_METHOD_PREFIXES)


def _split_method(full_method: str) -> tuple[str, str]:
    service, _, method = full_method.lstrip("/").partition("/")
    return service, method


def _rpc_attributes(full_method: str) -> dict[str, str]:
    service, method = _split_method(full_method)
    return {"rpc.system": "grpc", "rpc.service": service, "rpc.method": method}


def _end_with_code(span: Span, code: grpc.StatusCode, details: str | None = None) -> None:
    span.set_attribute(ATTR_GRPC_STATUS_CODE, code.value[0])
    if code != grpc.StatusCode.OK:
        span.set_status(Status(StatusCode.ERROR, f"{code.name}: {details or ''}".rstrip(": ")))
    span.end()


class TracingServerInterceptor(grpc.aio.ServerInterceptor):
    """Starts a SERVER span per RPC as the child of the caller's span (W3C context from metadata).

    Works for all four RPC shapes and for both streaming styles: async-generator handlers and
    handlers that use `context.read()`/`context.write()`.
    """

    def __init__(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        self._tracer = get_tracer(tracer_provider)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Any],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or _untraced(method):
            return handler
        parent = propagate.extract(tuple(handler_call_details.invocation_metadata or ()), getter=_GETTER)
        if handler.unary_unary:
            return handler._replace(unary_unary=self._wrap(handler.unary_unary, method, parent))
        if handler.unary_stream:
            return handler._replace(unary_stream=self._wrap(handler.unary_stream, method, parent))
        if handler.stream_unary:
            return handler._replace(stream_unary=self._wrap(handler.stream_unary, method, parent))
        return handler._replace(stream_stream=self._wrap(handler.stream_stream, method, parent))

    def _wrap(self, behavior: Callable[..., Any], method: str, parent: otel_context.Context) -> Callable[..., Any]:
        tracer = self._tracer

        @contextmanager
        def server_span(context: grpc.aio.ServicerContext) -> Iterator[Span]:
            span = tracer.start_span(method, context=parent, kind=SpanKind.SERVER, attributes=_rpc_attributes(method))
            token = otel_context.attach(trace.set_span_in_context(span, parent))
            request_token = _REQUEST_SPAN.set(span)
            code = grpc.StatusCode.OK
            try:
                yield span
            except (asyncio.CancelledError, GeneratorExit):
                # The client cancelled, or grpc closed the response generator early.
                code = grpc.StatusCode.CANCELLED
                raise
            except Exception as error:
                # context.abort() raises after setting the code; anything else is an unhandled error.
                code = _context_code(context) or grpc.StatusCode.UNKNOWN
                if code == grpc.StatusCode.UNKNOWN:
                    span.record_exception(error)
                raise
            finally:
                if code == grpc.StatusCode.OK:
                    code = _context_code(context) or grpc.StatusCode.OK
                _restore(request_token, token)
                _end_with_code(span, code, _context_details(context))

        if inspect.isasyncgenfunction(behavior):

            async def traced_stream(request: Any, context: grpc.aio.ServicerContext) -> None:
                # The handler's responses are written here, not by gRPC: a generator gRPC drives is
                # left suspended at a `yield` when its client goes away during a send, and is closed
                # later from another task (whose Context cannot undo the span's), while its cleanup
                # (cancelling the worker calls behind it) waits. Here it is closed at once, in this task.
                with server_span(context):
                    responses = behavior(request, context)
                    try:
                        async for response in responses:
                            await _send(context, response)
                    finally:
                        await responses.aclose()

            return traced_stream

        async def traced_call(request: Any, context: grpc.aio.ServicerContext) -> Any:
            with server_span(context):
                return await behavior(request, context)

        return traced_call


SEND_FAILURE_GRACE_S: Final = 0.1
"""How long a handler whose send failed waits for gRPC to report the client gone (and cancel it)."""


async def _send(context: grpc.aio.ServicerContext, response: Any) -> None:
    """Write one response. A send fails when the client has gone (it cancelled, or its connection
    dropped) a moment before gRPC says so and cancels the handler: waiting for that moment ends the
    call as the cancel it is, instead of an error gRPC logs with a traceback."""
    try:
        await context.write(response)
    except Exception:
        await asyncio.sleep(SEND_FAILURE_GRACE_S)
        raise


def _restore(request_token: contextvars.Token[Span | None], otel_token: object) -> None:
    """Undo the span's context, unless this runs in another Context than the one that set it.

    A response generator that gRPC leaves suspended at a `yield` (the client cancelled while a send
    was pending) is closed later by the event loop's finaliser, in a task of its own and a Context of
    its own: its tokens cannot be reset there, and OpenTelemetry's `detach` would log that as an
    ERROR with a traceback. Both tokens come from one Context, so the request span's tells for both;
    the foreign Context dies with its task, and the span still ends.
    """
    try:
        _REQUEST_SPAN.reset(request_token)
    except ValueError:  # "created in a different Context"
        return
    otel_context.detach(otel_token)  # type: ignore[arg-type]


def _context_code(context: grpc.aio.ServicerContext) -> grpc.StatusCode | None:
    code = context.code()
    if code is None or isinstance(code, grpc.StatusCode):
        return code
    # Some grpcio versions report the raw integer code.
    return next((status for status in grpc.StatusCode if status.value[0] == code), None)


def _context_details(context: grpc.aio.ServicerContext) -> str | None:
    details = context.details()
    return details.decode("utf-8", "replace") if isinstance(details, bytes) else details


class _ClientSpanMixin:
    """Starts a CLIENT span per call, injects its context into the metadata, ends it when the call is done."""

    def __init__(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        self._tracer = get_tracer(tracer_provider)
        # Done-callbacks schedule a task to read the final status; keep them referenced until they finish.
        self._pending: set[asyncio.Task[None]] = set()

    def _start(self, details: grpc.aio.ClientCallDetails) -> tuple[Span, grpc.aio.ClientCallDetails]:
        method = details.method.decode() if isinstance(details.method, bytes) else details.method
        span = self._tracer.start_span(method, kind=SpanKind.CLIENT, attributes=_rpc_attributes(method))
        metadata = grpc.aio.Metadata(*tuple(details.metadata or ()))
        propagate.inject(metadata, context=trace.set_span_in_context(span), setter=_SETTER)
        return span, details._replace(metadata=metadata)

    async def _invoke(self, continuation: Callable[..., Any], details: grpc.aio.ClientCallDetails, request: Any) -> Any:
        method = details.method.decode() if isinstance(details.method, bytes) else details.method
        if _untraced(method):
            return await continuation(details, request)
        span, traced_details = self._start(details)
        try:
            call = await continuation(traced_details, request)
        except grpc.aio.AioRpcError as error:
            _end_with_code(span, error.code(), error.details())
            raise
        except BaseException:
            _end_with_code(span, grpc.StatusCode.UNKNOWN)
            raise
        call.add_done_callback(lambda done: self._finish_later(span, done))
        return call

    def _finish_later(self, span: Span, call: grpc.aio.Call) -> None:
        task = asyncio.get_running_loop().create_task(self._finish(span, call))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    @staticmethod
    async def _finish(span: Span, call: grpc.aio.Call) -> None:
        try:
            code, details = await call.code(), await call.details()
        except BaseException:  # the call object can fail to report (e.g. loop closing): still end the span
            code, details = grpc.StatusCode.UNKNOWN, None
        _end_with_code(span, code, details)


class _UnaryUnaryClient(_ClientSpanMixin, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return await self._invoke(continuation, client_call_details, request)


class _UnaryStreamClient(_ClientSpanMixin, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return await self._invoke(continuation, client_call_details, request)


class _StreamUnaryClient(_ClientSpanMixin, grpc.aio.StreamUnaryClientInterceptor):
    async def intercept_stream_unary(self, continuation: Any, client_call_details: Any, request_iterator: Any) -> Any:
        return await self._invoke(continuation, client_call_details, request_iterator)


class _StreamStreamClient(_ClientSpanMixin, grpc.aio.StreamStreamClientInterceptor):
    async def intercept_stream_stream(self, continuation: Any, client_call_details: Any, request_iterator: Any) -> Any:
        return await self._invoke(continuation, client_call_details, request_iterator)


def server_interceptor(tracer_provider: trace.TracerProvider | None = None) -> grpc.aio.ServerInterceptor:
    """The interceptor to pass to `grpc.aio.server(interceptors=[...])`."""
    return TracingServerInterceptor(tracer_provider)


def client_interceptors(tracer_provider: trace.TracerProvider | None = None) -> list[grpc.aio.ClientInterceptor]:
    """The interceptors to pass to `grpc.aio.insecure_channel(..., interceptors=...)` (all four RPC shapes)."""
    return [
        _UnaryUnaryClient(tracer_provider),
        _UnaryStreamClient(tracer_provider),
        _StreamUnaryClient(tracer_provider),
        _StreamStreamClient(tracer_provider),
    ]


# --- Span helpers for the gateway's steps ----------------------------------------------------


@contextmanager
def step_span(
    name: str,
    attributes: Mapping[str, Any] | None = None,
    tracer_provider: trace.TracerProvider | None = None,
) -> Iterator[Span]:
    """A child span of the current one for one step (SPAN_NORMALISE, SPAN_CACHE_LOOKUP, ...).

    An exception leaving the block marks the span as an error and is re-raised.
    """
    with get_tracer(tracer_provider).start_as_current_span(name, attributes=dict(attributes or {})) as span:
        yield span


@contextmanager
def attempt_span(
    worker: str,
    zone: str,
    attempt: int,
    reason: str,
    tracer_provider: trace.TracerProvider | None = None,
) -> Iterator[Span]:
    """A span for one attempt at a worker stream: `attempt` counts from 1, `reason` says why it was
    made ("first", or what failed before: "unavailable", "deadline_exceeded", "resource_exhausted",
    "resume")."""
    attributes = {ATTR_WORKER: worker, ATTR_ZONE: zone, ATTR_ATTEMPT: attempt, ATTR_REASON: reason}
    with step_span(SPAN_ATTEMPT, attributes, tracer_provider) as span:
        yield span


def request_span() -> Span:
    """The server span of the RPC being handled (the current span outside an intercepted RPC)."""
    return _REQUEST_SPAN.get() or trace.get_current_span()


def record_time_to_first_audio(seconds: float) -> None:
    """Write time to first audio (seconds since the request arrived) on the request's span."""
    request_span().set_attribute(ATTR_TIME_TO_FIRST_AUDIO_S, float(seconds))
