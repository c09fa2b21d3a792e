"""Single flight end to end: concurrent requests for one uncached text make the acoustic worker run once.

Real processes on loopback (tests/conftest.py `mesh`: Redis, acoustic, vocoder, gateway). Two clients
ask for the same new text at the same moment. Both miss the cache (nothing has been stored yet), so
without single flight the acoustic worker would synthesise every sentence twice; with it, one request
leads and the other waits for the leader's mel (libs/cache/single_flight.py, libs/synthesis/pipeline.py).
"""

from __future__ import annotations

import threading
import time
import uuid

import grpc
import numpy as np
import pytest

from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc
from tests.support.client import Spoken, collect
from tests.support.faults.zone_mesh import wait_for
from tests.support.mesh import Mesh

pytestmark = pytest.mark.timeout(600)

ACOUSTIC_SENTENCES = "tts_acoustic_sentences_total"
CACHE_MISSES = 'tts_gateway_cache_operations_total{outcome="miss"}'
CACHE_HITS = 'tts_gateway_cache_operations_total{outcome="hit"}'
SENTENCES = 2


def _speak_together(address: str, text: str, clients: int) -> list[tuple[float, Spoken]]:
    """`clients` Synthesize calls for `text` released at one moment; (monotonic start, what came back) each."""
    barrier = threading.Barrier(clients)
    results: list[tuple[float, Spoken] | BaseException | None] = [None] * clients

    def call(slot: int) -> None:
        try:
            with grpc.insecure_channel(address) as channel:
                grpc.channel_ready_future(channel).result(timeout=10)  # connected first: only the calls race
                stub = tts_pb2_grpc.TextToSpeechStub(channel)
                barrier.wait(timeout=30)
                started = time.monotonic()
                results[slot] = (started, collect(stub.Synthesize(tts_pb2.SynthesizeRequest(text=text), timeout=120), started))
        except BaseException as error:  # reported by the test thread
            barrier.abort()
            results[slot] = error

    threads = [threading.Thread(target=call, args=(slot,)) for slot in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=180)
    for result in results:
        if not isinstance(result, tuple):
            raise AssertionError(f"a concurrent call failed: {result!r}")
    return results  # type: ignore[return-value]


def test_two_concurrent_requests_for_one_uncached_text_run_the_acoustic_model_once_per_sentence(mesh: Mesh) -> None:
    # Unique in the session (its cache is the session's); a first sentence spoken whole: no clause
    # to open with, and under twice the opening (libs.text.long_sentences.OPENING_AFTER).
    number = uuid.uuid4().int % 1_000
    text = f"Two listeners asked for this text together as ticket {number}. Each of them hears all of it."
    sentences_before = mesh.metric("acoustic", ACOUSTIC_SENTENCES)
    misses_before = mesh.metric("gateway", CACHE_MISSES)
    hits_before = mesh.metric("gateway", CACHE_HITS)

    (first_start, first), (second_start, second) = _speak_together(mesh.gateway_address, text, clients=2)

    # Both calls were running together: each began before the other heard anything.
    assert second_start < first_start + first.first_audio_s and first_start < second_start + second.first_audio_s, (
        f"the calls did not overlap: starts {first_start:.3f}/{second_start:.3f}, "
        f"first audio after {first.first_audio_s:.3f}/{second.first_audio_s:.3f} s"
    )
    # Both heard the whole text, and the same audio sample for sample.
    for spoken in (first, second):
        assert [r.sentence.index for r in spoken.responses if r.HasField("sentence")] == list(range(SENTENCES))
        assert [r.sentence_end for r in spoken.responses].count(True) == SENTENCES
        assert 2.0 < spoken.duration_s < 15.0, spoken.duration_s
    assert np.sqrt(np.mean(first.samples**2)) > 0.02, "audio is (near) silence"
    assert np.array_equal(first.samples, second.samples)
    # Each request looked every sentence up and missed: the second was not served by the cache ...
    assert mesh.metric("gateway", CACHE_MISSES) - misses_before == 2 * SENTENCES
    assert mesh.metric("gateway", CACHE_HITS) - hits_before == 0
    # ... and yet the acoustic worker made each sentence once.
    wait_for(lambda: mesh.metric("acoustic", ACOUSTIC_SENTENCES) - sentences_before >= SENTENCES, timeout_s=10,
             what="the acoustic worker counting its sentences")  # fmt: skip
    time.sleep(0.5)
    assert mesh.metric("acoustic", ACOUSTIC_SENTENCES) - sentences_before == SENTENCES
    print(f"\nfirst audio {first.first_audio_s:.3f} / {second.first_audio_s:.3f} s, "
          f"total {first.total_s:.3f} / {second.total_s:.3f} s, audio {first.duration_s:.2f} s; "
          f"starts {abs(second_start - first_start) * 1000:.1f} ms apart")  # fmt: skip
