"""One client request through the real mesh is one trace: gateway, acoustic and vocoder spans under one
trace id, exported over OTLP to a collector stub this test runs (`tests.support.otlp`)."""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from opentelemetry.proto.trace.v1 import trace_pb2

from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc
from libs.telemetry import tracing
from tests.support.client import collect
from tests.support.mesh import Mesh
from tests.support.otlp import ExportedSpan, SpanCollector

SERVER = trace_pb2.Span.SPAN_KIND_SERVER
CLIENT = trace_pb2.Span.SPAN_KIND_CLIENT
SYNTHESIZE = "/tts.v1.TextToSpeech/Synthesize"
SYNTHESIZE_MEL = "/tts.acoustic.v1.Acoustic/SynthesizeMel"
VOCODE = "/tts.vocoder.v1.Vocoder/Vocode"
ZONE = "zone-t"


@pytest.fixture(scope="module")
def traced_mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Mesh, SpanCollector]]:
    """The mesh with every service exporting all spans to a collector stub, quickly."""
    with SpanCollector() as collector:
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint,
            "OTEL_TRACES_SAMPLER": "always_on",
            "OTEL_BSP_SCHEDULE_DELAY": "200",  # export every 200 ms instead of 5 s
        }
        mesh = Mesh(log_dir=Path(tmp_path_factory.mktemp("traced-mesh-logs")), zone=ZONE, env=env).start()
        try:
            yield mesh, collector
        finally:
            mesh.stop()


def _synthesize_in_trace(mesh: Mesh, text: str) -> tuple[bytes, bytes, float]:
    """Synthesize `text` as the child of a client span we make up; returns (trace id, parent span id, first audio s)."""
    trace_id, span_id = random.getrandbits(128), random.getrandbits(64)
    metadata = (("traceparent", f"00-{trace_id:032x}-{span_id:016x}-01"),)
    with grpc.insecure_channel(mesh.gateway_address) as channel:
        stub = tts_pb2_grpc.TextToSpeechStub(channel)
        started = time.monotonic()
        spoken = collect(stub.Synthesize(tts_pb2.SynthesizeRequest(text=text), metadata=metadata, timeout=120), started)
    assert spoken.duration_s > 0.5
    return trace_id.to_bytes(16, "big"), span_id.to_bytes(8, "big"), spoken.first_audio_s


def _wait_for_trace(collector: SpanCollector, trace_id: bytes, done, timeout_s: float = 20.0) -> list[ExportedSpan]:
    deadline = time.monotonic() + timeout_s
    while True:
        spans = collector.trace(trace_id)
        if done(spans) or time.monotonic() > deadline:
            return spans
        time.sleep(0.1)


def test_one_synthesize_is_one_trace_across_gateway_acoustic_and_vocoder(traced_mesh: tuple[Mesh, SpanCollector]) -> None:
    mesh, collector = traced_mesh
    text = f"Tracing follows one request. Through three services {uuid.uuid4().int % 100000}."
    trace_id, client_span_id, first_audio_s = _synthesize_in_trace(mesh, text)

    def complete(spans: list[ExportedSpan]) -> bool:
        names = {(span.service, span.name) for span in spans}
        return {("gateway", SYNTHESIZE), ("acoustic", SYNTHESIZE_MEL), ("vocoder", VOCODE)} <= names and (
            sum(span.name == tracing.SPAN_CACHE_WRITE for span in spans) == 2
        )

    spans = _wait_for_trace(collector, trace_id, complete)
    assert {span.service for span in spans} == {"gateway", "acoustic", "vocoder"}, [(s.service, s.name) for s in spans]
    assert {span.zone for span in spans} == {ZONE}
    by_id = {span.span_id: span for span in spans}

    def only(service: str, name: str, kind: int | None = None) -> ExportedSpan:
        found = [s for s in spans if s.service == service and s.name == name and (kind is None or s.kind == kind)]
        assert len(found) == 1, (service, name, [(s.service, s.name) for s in spans])
        return found[0]

    # The gateway continues the client's trace, and records time to first audio on its request span.
    request = only("gateway", SYNTHESIZE, SERVER)
    assert request.parent_span_id == client_span_id
    assert 0.0 < request.attributes[tracing.ATTR_TIME_TO_FIRST_AUDIO_S] <= first_audio_s
    assert request.attributes[tracing.ATTR_GRPC_STATUS_CODE] == 0
    assert request.attributes[tracing.ATTR_VOICE]
    # The gateway's own steps hang off the request: one normalisation, and one phonemisation per
    # sentence chunk (each done when the pipeline asks for it).
    assert only("gateway", tracing.SPAN_NORMALISE).parent_span_id == request.span_id
    phonemised = [s for s in spans if s.service == "gateway" and s.name == tracing.SPAN_PHONEMISE]
    assert len(phonemised) == 2 and all(s.parent_span_id == request.span_id for s in phonemised)
    lookups = [s for s in spans if s.name == tracing.SPAN_CACHE_LOOKUP]
    writes = [s for s in spans if s.name == tracing.SPAN_CACHE_WRITE]
    assert [s.attributes[tracing.ATTR_CACHE_HIT] for s in lookups] == [False, False]  # two new sentences
    assert [s.attributes["tts.cache.stored"] for s in writes] == [True, True]
    # Each worker stream: the gateway's CLIENT span, the worker's SERVER span as its child.
    for service, method in (("acoustic", SYNTHESIZE_MEL), ("vocoder", VOCODE)):
        client = only("gateway", method, CLIENT)
        server = only(service, method, SERVER)
        assert server.parent_span_id == client.span_id
        assert server.attributes[tracing.ATTR_GRPC_STATUS_CODE] in (0, grpc.StatusCode.CANCELLED.value[0])
        ancestor = by_id[client.parent_span_id]
        while ancestor.span_id != request.span_id:  # the client span sits under the request (maybe via steps)
            ancestor = by_id[ancestor.parent_span_id]
    # The acoustic worker's plan of each sentence is inside its stream's span.
    acoustic_server = only("acoustic", SYNTHESIZE_MEL, SERVER)
    plans = [s for s in spans if s.name == tracing.SPAN_ACOUSTIC_PLAN]
    assert sorted(s.attributes[tracing.ATTR_SENTENCE_INDEX] for s in plans) == [0, 1]
    assert all(s.parent_span_id == acoustic_server.span_id for s in plans)
    # Every model step has a span inside its stream's, saying where and how it was scheduled: each
    # sentence's mel chunks and the vocoder's steps.
    vocoder_server = only("vocoder", VOCODE, SERVER)
    for server, name in ((acoustic_server, tracing.SPAN_ACOUSTIC_CHUNK), (vocoder_server, tracing.SPAN_VOCODER_STEP)):
        steps = [s for s in spans if s.name == name]
        assert {s.attributes[tracing.ATTR_SENTENCE_INDEX] for s in steps} == {0, 1}, name
        assert all(s.parent_span_id == server.span_id for s in steps), name
        for step in steps + plans:
            assert step.attributes[tracing.ATTR_STEP_LANE] in ("urgent", "first", "background"), step
            assert step.attributes[tracing.ATTR_STEP_QUEUED_S] >= 0 and step.attributes[tracing.ATTR_STEP_CPU_S] > 0, step
            assert step.attributes[tracing.ATTR_STEP_UNITS] > 0 and isinstance(step.attributes[tracing.ATTR_STEP_SLACK_S], float), step
        # The stream started with a first audio: its first steps went with first audios, later ones did not.
        assert {s.attributes[tracing.ATTR_STEP_STARTING] for s in steps} == {True, False}, name


def test_a_repeated_request_is_traced_as_cache_hits_without_an_acoustic_stream(traced_mesh: tuple[Mesh, SpanCollector]) -> None:
    mesh, collector = traced_mesh
    text = f"Say it once. Say it twice {uuid.uuid4().int % 100000}."
    _synthesize_in_trace(mesh, text)
    trace_id, _, _ = _synthesize_in_trace(mesh, text)

    def complete(spans: list[ExportedSpan]) -> bool:
        return any(s.service == "vocoder" and s.name == VOCODE for s in spans) and any(
            s.service == "gateway" and s.name == SYNTHESIZE for s in spans
        )

    spans = _wait_for_trace(collector, trace_id, complete)
    assert {span.service for span in spans} == {"gateway", "vocoder"}
    lookups = [s for s in spans if s.name == tracing.SPAN_CACHE_LOOKUP]
    assert [s.attributes[tracing.ATTR_CACHE_HIT] for s in lookups] == [True, True]
    assert not [s for s in spans if s.name in (SYNTHESIZE_MEL, tracing.SPAN_CACHE_WRITE)]
