"""Tracing across real grpc.aio servers on loopback: one trace per request, through streaming calls.

Three tiny services stand in for the mesh: a client calls A (unary-stream, like Synthesize); A opens
a bidirectional stream to B (driven with write()/read(), answered by an async generator) and one to
C (driven by a request iterator, answered with context.read()/write()). Each service has its own
tracer provider and `service.name`, as separate processes would, and they share one in-memory
exporter so the test can see every span.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from concurrent import futures

import grpc
import grpc.aio
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from libs.telemetry import tracing
from tests.support.servers import aio_server, sync_server

ALWAYS = {"OTEL_TRACES_SAMPLER": "always_on"}
FOLLOW_PARENT_ELSE_DROP = {"OTEL_TRACES_SAMPLER": "parentbased_always_off"}

# Names of the stand-in gateway's own steps around its two worker calls.
ACOUSTIC_STEP = "test.acoustic.stream"
VOCODER_STEP = "test.vocoder.stream"


def _provider(name: str, exporter: InMemorySpanExporter, environ: dict[str, str] | None = None):
    return tracing.setup_tracing(name, zone=f"zone-{name}", environ=environ or ALWAYS, exporter=exporter, set_global=False)


async def _start(provider, handlers: dict[str, grpc.RpcMethodHandler]) -> tuple[grpc.aio.Server, int]:
    server = aio_server(interceptors=[tracing.server_interceptor(provider)])
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("test.Chain", handlers)])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


class Mesh:
    """Client -> A; A -> B (bidi) and A -> C (bidi), each with its own provider."""

    def __init__(self, exporter: InMemorySpanExporter, worker_env: dict[str, str] | None = None) -> None:
        self.exporter = exporter
        self.providers = {name: _provider(name, exporter, worker_env) for name in ("A", "B", "C")}
        self.servers: list[grpc.aio.Server] = []
        self.channels: list[grpc.aio.Channel] = []

    async def start(self) -> int:
        b_tracer = tracing.get_tracer(self.providers["B"])
        c_tracer = tracing.get_tracer(self.providers["C"])

        async def b_bidi(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
            async for request in requests:
                with b_tracer.start_as_current_span("b.model"):
                    yield request + b"|mel"

        async def c_bidi(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> None:
            while (request := await context.read()) is not grpc.aio.EOF:
                with c_tracer.start_as_current_span("c.model"):
                    await context.write(request + b"|pcm")

        server_b, port_b = await _start(self.providers["B"], {"Bidi": grpc.stream_stream_rpc_method_handler(b_bidi)})
        server_c, port_c = await _start(self.providers["C"], {"Bidi": grpc.stream_stream_rpc_method_handler(c_bidi)})
        provider_a = self.providers["A"]
        to_b = grpc.aio.insecure_channel(f"127.0.0.1:{port_b}", interceptors=tracing.client_interceptors(provider_a))
        to_c = grpc.aio.insecure_channel(f"127.0.0.1:{port_c}", interceptors=tracing.client_interceptors(provider_a))

        async def a_synthesize(text: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
            if text == b"missing":
                await context.abort(grpc.StatusCode.NOT_FOUND, "no such voice")
            with tracing.step_span(tracing.SPAN_PHONEMISE, {tracing.ATTR_SENTENCE_INDEX: 0}, provider_a):
                phonemes = text.upper()
            with tracing.step_span(tracing.SPAN_CACHE_LOOKUP, tracer_provider=provider_a) as lookup:
                lookup.set_attribute(tracing.ATTR_CACHE_HIT, False)
            with tracing.attempt_span("acoustic", "zone-b", 1, "first", provider_a):
                with tracing.step_span(ACOUSTIC_STEP, tracer_provider=provider_a):
                    acoustic = to_b.stream_stream("/test.Chain/Bidi")()
                    await acoustic.write(phonemes)
                    await acoustic.done_writing()
                    mel = await acoustic.read()
                    assert await acoustic.read() is grpc.aio.EOF

            async def mel_slices() -> AsyncIterator[bytes]:
                yield mel

            with tracing.step_span(VOCODER_STEP, tracer_provider=provider_a):
                async for pcm in to_c.stream_stream("/test.Chain/Bidi")(mel_slices()):
                    tracing.record_time_to_first_audio(0.125)
                    yield pcm

        server_a, port_a = await _start(provider_a, {"Synthesize": grpc.unary_stream_rpc_method_handler(a_synthesize)})
        self.servers = [server_a, server_b, server_c]
        self.channels = [to_b, to_c]
        return port_a

    async def stop(self) -> None:
        for channel in self.channels:
            await channel.close()
        for server in self.servers:
            await server.stop(None)

    def spans(self) -> list[ReadableSpan]:
        for provider in self.providers.values():
            provider.force_flush()
        return list(self.exporter.get_finished_spans())


def _service(span: ReadableSpan) -> str:
    return str(span.resource.attributes["service.name"])


async def _synthesize(port: int, client_provider, text: bytes) -> list[bytes]:
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}", interceptors=tracing.client_interceptors(client_provider))
    try:
        return [chunk async for chunk in channel.unary_stream("/test.Chain/Synthesize")(text)]
    finally:
        await channel.close()


async def test_one_request_is_one_trace_across_three_services_through_streams() -> None:
    exporter = InMemorySpanExporter()
    client_provider = _provider("client", exporter)
    mesh = Mesh(exporter)
    port = await mesh.start()
    try:
        assert await _synthesize(port, client_provider, b"hello") == [b"HELLO|mel|pcm"]
        await asyncio.sleep(0.1)  # let the done-callbacks end the last client spans
    finally:
        await mesh.stop()
    client_provider.force_flush()
    spans = mesh.spans()

    assert {_service(span) for span in spans} == {"client", "A", "B", "C"}
    assert len({span.context.trace_id for span in spans}) == 1
    by_id = {span.context.span_id: span for span in spans}
    roots = [span for span in spans if span.parent is None]
    assert [(root.name, _service(root)) for root in roots] == [("/test.Chain/Synthesize", "client")]

    def parent_of(span: ReadableSpan) -> ReadableSpan:
        return by_id[span.parent.span_id]

    def only(service: str, name: str, kind: SpanKind | None = None) -> ReadableSpan:
        found = [s for s in spans if _service(s) == service and s.name == name and (kind is None or s.kind == kind)]
        assert len(found) == 1, (service, name, found)
        return found[0]

    a_server = only("A", "/test.Chain/Synthesize", SpanKind.SERVER)
    assert parent_of(a_server) is roots[0]
    assert a_server.attributes[tracing.ATTR_TIME_TO_FIRST_AUDIO_S] == 0.125
    assert a_server.attributes[tracing.ATTR_GRPC_STATUS_CODE] == grpc.StatusCode.OK.value[0]
    for step in (tracing.SPAN_PHONEMISE, tracing.SPAN_CACHE_LOOKUP, tracing.SPAN_ATTEMPT, VOCODER_STEP):
        assert parent_of(only("A", step)) is a_server
    attempt = only("A", tracing.SPAN_ATTEMPT)
    assert (attempt.attributes[tracing.ATTR_ZONE], attempt.attributes[tracing.ATTR_REASON]) == ("zone-b", "first")
    assert parent_of(only("A", ACOUSTIC_STEP)) is attempt

    # A's client span for each bidi stream sits under the step that opened it; the worker's server
    # span is its child, and the worker's own work is under that.
    a_clients = [s for s in spans if _service(s) == "A" and s.kind == SpanKind.CLIENT]
    assert sorted(parent_of(s).name for s in a_clients) == [ACOUSTIC_STEP, VOCODER_STEP]
    for worker, work in (("B", "b.model"), ("C", "c.model")):
        server = only(worker, "/test.Chain/Bidi", SpanKind.SERVER)
        assert parent_of(server) in a_clients
        assert parent_of(only(worker, work)) is server
        assert server.attributes[tracing.ATTR_GRPC_STATUS_CODE] == 0
    assert all(s.end_time is not None and s.status.status_code != StatusCode.ERROR for s in spans)


async def test_workers_follow_the_gateways_sampling_decision() -> None:
    """Workers drop their own roots but keep spans of a sampled request, and record none of an unsampled one."""
    exporter = InMemorySpanExporter()
    mesh = Mesh(exporter, worker_env=FOLLOW_PARENT_ELSE_DROP)
    port = await mesh.start()
    try:
        dropped = _provider("client", exporter, {"OTEL_TRACES_SAMPLER": "always_off"})
        assert await _synthesize(port, dropped, b"one") == [b"ONE|mel|pcm"]
        await asyncio.sleep(0.1)
        assert mesh.spans() == []

        kept = _provider("client", exporter, ALWAYS)
        assert await _synthesize(port, kept, b"two") == [b"TWO|mel|pcm"]
        await asyncio.sleep(0.1)
    finally:
        await mesh.stop()
    kept.force_flush()
    spans = mesh.spans()
    assert {_service(span) for span in spans} == {"client", "A", "B", "C"}
    assert len({span.context.trace_id for span in spans}) == 1


async def test_error_status_is_recorded_on_client_and_server_spans() -> None:
    exporter = InMemorySpanExporter()
    client_provider = _provider("client", exporter)
    mesh = Mesh(exporter)
    port = await mesh.start()
    try:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await _synthesize(port, client_provider, b"missing")
        assert raised.value.code() == grpc.StatusCode.NOT_FOUND
        await asyncio.sleep(0.1)
    finally:
        await mesh.stop()
    client_provider.force_flush()
    spans = mesh.spans()
    assert sorted((_service(s), s.kind) for s in spans) == [("A", SpanKind.SERVER), ("client", SpanKind.CLIENT)]
    for span in spans:
        assert span.attributes[tracing.ATTR_GRPC_STATUS_CODE] == grpc.StatusCode.NOT_FOUND.value[0]
        assert span.status.status_code == StatusCode.ERROR
        assert "NOT_FOUND" in (span.status.description or "")


async def test_cancelled_stream_still_ends_both_spans() -> None:
    exporter = InMemorySpanExporter()
    client_provider = _provider("client", exporter)
    server_provider = _provider("server", exporter)
    release = asyncio.Event()

    async def endless(request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        yield b"first"
        await release.wait()
        yield b"never read"

    server, port = await _start(server_provider, {"Endless": grpc.unary_stream_rpc_method_handler(endless)})
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}", interceptors=tracing.client_interceptors(client_provider))
    try:
        call = channel.unary_stream("/test.Chain/Endless")(b"go")
        assert await call.read() == b"first"
        call.cancel()
        for _ in range(50):
            await asyncio.sleep(0.02)
            client_provider.force_flush()
            server_provider.force_flush()
            if len(exporter.get_finished_spans()) == 2:
                break
    finally:
        release.set()
        await channel.close()
        await server.stop(None)
    spans = {span.kind: span for span in exporter.get_finished_spans()}
    assert set(spans) == {SpanKind.CLIENT, SpanKind.SERVER}
    assert spans[SpanKind.CLIENT].attributes[tracing.ATTR_GRPC_STATUS_CODE] == grpc.StatusCode.CANCELLED.value[0]
    assert spans[SpanKind.SERVER].attributes[tracing.ATTR_GRPC_STATUS_CODE] == grpc.StatusCode.CANCELLED.value[0]
    assert spans[SpanKind.SERVER].parent.span_id == spans[SpanKind.CLIENT].context.span_id


def test_default_config_samples_one_trace_in_a_hundred_and_exports_nowhere() -> None:
    config = tracing.TracingConfig.from_env("gateway", environ={})
    assert (config.sampler, config.sample_ratio, config.exporter) == ("parentbased_traceidratio", 0.01, "none")
    provider = tracing.setup_tracing("gateway", environ={}, set_global=False)
    tracer = tracing.get_tracer(provider)
    sampled = 0
    for _ in range(4000):
        with tracer.start_as_current_span("request") as span:
            sampled += span.is_recording()
    # Binomial(4000, 0.01): mean 40, standard deviation about 6.3.
    assert 15 <= sampled <= 70


def test_sampler_and_exporter_settings_come_from_otel_env_vars() -> None:
    config = tracing.TracingConfig.from_env(
        "vocoder",
        environ={
            "OTEL_TRACES_SAMPLER": "traceidratio",
            "OTEL_TRACES_SAMPLER_ARG": "0.25",
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317",
        },
    )
    assert (config.sampler, config.sample_ratio, config.exporter, config.otlp_endpoint) == (
        "traceidratio",
        0.25,
        "otlp",
        "http://collector:4317",
    )
    assert "0.25" in config.build_sampler().get_description()
    off = tracing.TracingConfig.from_env("vocoder", environ={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_TRACES_EXPORTER": "none"})
    assert off.exporter == "none"


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"OTEL_TRACES_SAMPLER": "sometimes"}, "parentbased_traceidratio"),
        ({"OTEL_TRACES_SAMPLER_ARG": "1.5"}, "outside 0..1"),
        ({"OTEL_TRACES_SAMPLER_ARG": "often"}, "not a number"),
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "otlp, console, none"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, "only 'grpc'"),
    ],
)
def test_bad_tracing_env_is_rejected_with_what_to_write_instead(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        tracing.TracingConfig.from_env("gateway", environ=environ)


class _Collector(trace_service_pb2_grpc.TraceServiceServicer):
    """An OTLP trace collector stub that remembers what it received."""

    def __init__(self) -> None:
        self.requests: list[trace_service_pb2.ExportTraceServiceRequest] = []
        self.received = threading.Event()

    def Export(self, request, context):
        self.requests.append(request)
        self.received.set()
        return trace_service_pb2.ExportTraceServiceResponse()


def test_otlp_endpoint_sends_spans_to_the_collector_with_the_service_name() -> None:
    collector = _Collector()
    server = sync_server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(collector, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        environ = {"OTEL_TRACES_SAMPLER": "always_on", "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"}
        provider = tracing.setup_tracing("acoustic", zone="zone-b", environ=environ, set_global=False)
        with tracing.get_tracer(provider).start_as_current_span("tts.model.infer"):
            pass
        provider.force_flush()
        assert collector.received.wait(10)
        provider.shutdown()
    finally:
        server.stop(None)
    resource_spans = collector.requests[0].resource_spans[0]
    resource = {kv.key: kv.value.string_value for kv in resource_spans.resource.attributes}
    assert resource["service.name"] == "acoustic"
    assert resource["cloud.availability_zone"] == "zone-b"
    assert [span.name for span in resource_spans.scope_spans[0].spans] == ["tts.model.infer"]


async def test_unary_and_client_streaming_calls_are_traced_too() -> None:
    exporter = InMemorySpanExporter()
    client_provider = _provider("client", exporter)
    server_provider = _provider("server", exporter)

    async def voices(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return b"joe"

    async def total(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> bytes:
        return str(sum([len(r) async for r in requests])).encode()

    server, port = await _start(
        server_provider,
        {
            "ListVoices": grpc.unary_unary_rpc_method_handler(voices),
            "Total": grpc.stream_unary_rpc_method_handler(total),
        },
    )
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}", interceptors=tracing.client_interceptors(client_provider))

    async def pieces() -> AsyncIterator[bytes]:
        yield b"ab"
        yield b"cde"

    try:
        assert await channel.unary_unary("/test.Chain/ListVoices")(b"") == b"joe"
        assert await channel.stream_unary("/test.Chain/Total")(pieces()) == b"5"
        await asyncio.sleep(0.1)
    finally:
        await channel.close()
        await server.stop(None)
    client_provider.force_flush()
    server_provider.force_flush()
    spans = exporter.get_finished_spans()
    for method in ("/test.Chain/ListVoices", "/test.Chain/Total"):
        [client] = [s for s in spans if s.name == method and s.kind == SpanKind.CLIENT]
        [server_span] = [s for s in spans if s.name == method and s.kind == SpanKind.SERVER]
        assert server_span.parent.span_id == client.context.span_id
        assert server_span.context.trace_id == client.context.trace_id
        assert client.attributes[tracing.ATTR_GRPC_STATUS_CODE] == 0


async def test_health_checks_make_no_spans() -> None:
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    exporter = InMemorySpanExporter()
    provider = _provider("worker", exporter)
    server = aio_server(interceptors=[tracing.server_interceptor(provider)])
    servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    await servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}", interceptors=tracing.client_interceptors(provider))
    try:
        reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""))
    finally:
        await channel.close()
        await server.stop(None)
    provider.force_flush()
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
    assert exporter.get_finished_spans() == ()
