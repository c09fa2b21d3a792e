"""Two voices served by one mesh at once, on real processes: the default voice and a Piper-format
voice built here (seeded random weights, a short build of its mel head and adapter: structure, not
how it sounds).

Every worker serves both voices from the same folder; zone-a's load the built one on its first
stream, zone-b's preload both. Each voice's audio is compared, sample for sample, with a mesh that
holds only that voice; the cache keeps each voice's sentences apart; a stream goes to the workers
that hold its voice, and when one of them is killed mid-sentence the stream resumes on a worker that
loads the voice, with audio unchanged.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest

from libs.pb.tts.acoustic.v1 import acoustic_pb2_grpc
from libs.pb.tts.common.v1 import load_pb2
from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc
from libs.pb.tts.vocoder.v1 import vocoder_pb2_grpc
from libs.upstream.loads import LOAD_POLL_S
from libs.voice.assets import default_voice_assets
from libs.voice.registry import DEFAULT_VOICE_NAME
from tests.support.faults.scenarios import LONG_TEXT, unique
from tests.support.faults.zone_mesh import EXACT_WORKER_ENV, ZoneMesh, metric_sum, speak, worker_name
from tests.support.mesh import Mesh
from tests.support.piper_voices import TinyVoice, build_voice

pytestmark = [
    pytest.mark.timeout(900),
    pytest.mark.skipif(
        not default_voice_assets().mel_head_path.exists(),
        reason="the default voice's trained weights (assets/voices/en_US-joe-medium) are not built yet",
    ),
]

BUILT = TinyVoice("en_US-tiny-medium")
TRIO = TinyVoice("en_GB-trio-low", sample_rate_hz=16_000, speakers=("alice", "bob", "carol"), language_code="en_GB", espeak_voice="en-gb-x-rp", seed=1)
"""A voice of three named speakers at 16 kHz ("low")."""
TEXTS = ("The same words, in two voices. Each keeps its own.", LONG_TEXT)


@pytest.fixture(scope="module")
def voices_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("voices")
    for voice in (BUILT, TRIO):
        build_voice(voice, folder, tmp_path_factory.mktemp("voice-build"))
    return folder


def _worker_load(address: str, kind: str) -> load_pb2.WorkerLoad:
    with grpc.insecure_channel(address) as channel:
        stub = acoustic_pb2_grpc.AcousticStub(channel) if kind == "acoustic" else vocoder_pb2_grpc.VocoderStub(channel)
        return stub.GetLoad(load_pb2.GetLoadRequest(), timeout=10)


@pytest.fixture(scope="module")
def alone(voices_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], np.ndarray]:
    """Each voice's audio of each text from a mesh whose workers hold that voice only."""
    references: dict[tuple[str, str], np.ndarray] = {}
    for voice in (BUILT.name, DEFAULT_VOICE_NAME):
        env = {**EXACT_WORKER_ENV, "TTS_VOICES_DIR": str(voices_dir), "TTS_PRELOAD_VOICES": voice}
        mesh = Mesh(log_dir=tmp_path_factory.mktemp(f"alone-{voice}"), secure=False, env=env).start()
        try:
            for text in TEXTS:
                references[(voice, text)] = speak(mesh.gateway_address, text, voice=voice).samples
            for kind in ("acoustic", "vocoder"):
                assert list(_worker_load(mesh.services[kind].address, kind).loaded_voices) == [voice]
        finally:
            mesh.stop()
    return references


@pytest.fixture(scope="module")
def mesh(voices_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZoneMesh]:
    folder = {"TTS_VOICES_DIR": str(voices_dir)}
    zones = ZoneMesh(
        log_dir=tmp_path_factory.mktemp("voices-mesh"),
        worker_env={
            worker_name(kind, zone): {**folder, "TTS_PRELOAD_VOICES": "default" if zone == "zone-a" else "all"}
            for kind in ("acoustic", "vocoder")
            for zone in ("zone-a", "zone-b")
        },
    ).start()
    try:
        zones.start_gateway("gateway", env=folder)
        time.sleep(2 * LOAD_POLL_S)  # routing by voice reads what each worker holds from their loads
        yield zones
    finally:
        zones.stop()


def _loaded(mesh: ZoneMesh, kind: str, zone: str) -> list[str]:
    return list(_worker_load(mesh.workers[worker_name(kind, zone)].address, kind).loaded_voices)


def test_the_gateway_lists_both_voices(mesh: ZoneMesh) -> None:
    with grpc.insecure_channel(mesh.gateways["gateway"].address) as channel:
        voices = tts_pb2_grpc.TextToSpeechStub(channel).ListVoices(tts_pb2.ListVoicesRequest(), timeout=10).voices
    assert {voice.name for voice in voices} >= {DEFAULT_VOICE_NAME, BUILT.name, TRIO.name}
    trio = next(voice for voice in voices if voice.name == TRIO.name)
    assert dict(trio.speakers) == {"alice": 0, "bob": 1, "carol": 2} and trio.natural_sample_rate_hz == 16_000
    assert trio.quality == "low" and trio.language_code == "en-GB"


def _say(address: str, text: str, **fields: object) -> tuple[np.ndarray, int]:
    with grpc.insecure_channel(address) as channel:
        stub = tts_pb2_grpc.TextToSpeechStub(channel)
        request = tts_pb2.SynthesizeRequest(text=text, encoding=tts_pb2.FLOAT_PCM, **fields)
        responses = list(stub.Synthesize(request, timeout=120))
    samples = np.frombuffer(b"".join(response.audio for response in responses), dtype="<f4")
    return samples, responses[0].sample_rate_hz


def test_a_speaker_is_chosen_by_name_or_id_and_a_16_khz_voice_is_served_end_to_end(mesh: ZoneMesh) -> None:
    address = mesh.gateways["gateway"].address
    text = unique("Three speakers share one voice.")
    by_name, rate = _say(address, text, voice=TRIO.name, speaker="bob")
    by_id, _ = _say(address, text, voice=TRIO.name, speaker_id=1)
    by_digits, _ = _say(address, text, voice=TRIO.name, speaker="1")
    alice, _ = _say(address, text, voice=TRIO.name, speaker="alice")
    assert rate == 16_000 and by_name.size > 0
    assert np.array_equal(by_name, by_id) and np.array_equal(by_name, by_digits)
    assert by_name.shape != alice.shape or not np.array_equal(by_name, alice), "speakers share cached audio"
    for rate_hz in (24_000, 48_000):  # OpenAI's pcm rate, and a rate three times the voice's
        resampled, rate = _say(address, text, voice=TRIO.name, speaker="bob", sample_rate_hz=rate_hz)
        assert rate == rate_hz and abs(resampled.size * 16_000 / rate_hz - by_name.size) <= 48
    # zone-b preloads every voice: the gateway, just started, asked what each zone holds before it
    # asked one to load the voice, so its own zone did not load it (it did when the loads were not known yet)
    for kind in ("acoustic", "vocoder"):
        assert TRIO.name not in _loaded(mesh, kind, "zone-a"), f"the {kind} worker of zone-a loaded a voice zone-b holds"
    with pytest.raises(grpc.RpcError) as refused:
        _say(address, text, voice=TRIO.name, speaker="dave")
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "alice (0), bob (1), carol (2)" in refused.value.details()


def test_a_stream_goes_to_the_workers_holding_its_voice(mesh: ZoneMesh, alone: dict) -> None:
    assert _loaded(mesh, "acoustic", "zone-a") == [DEFAULT_VOICE_NAME]
    before = {zone: mesh.worker_streams("acoustic", zone) for zone in ("zone-a", "zone-b")}
    mesh.flush_redis()
    spoken = speak(mesh.gateways["gateway"].address, TEXTS[0], voice=BUILT.name)
    assert np.array_equal(spoken.samples, alone[(BUILT.name, TEXTS[0])])
    # The gateway's own zone can load the voice, but zone-b holds it: the stream crossed over.
    assert mesh.worker_streams("acoustic", "zone-b") > before["zone-b"]
    assert mesh.worker_streams("acoustic", "zone-a") == before["zone-a"]
    assert _loaded(mesh, "acoustic", "zone-a") == [DEFAULT_VOICE_NAME], "a worker that did not need the voice loaded it"


def test_each_voice_gets_its_own_audio_and_the_cache_never_crosses_voices(mesh: ZoneMesh, alone: dict) -> None:
    address = mesh.gateways["gateway"].address
    mesh.flush_redis()
    first: dict[tuple[str, str], np.ndarray] = {}

    def say(voice: str, text: str) -> None:
        first[(voice, text)] = speak(address, text, voice=voice, timeout_s=120).samples

    # The same texts in both voices, all at once: nothing cached, nothing shared.
    threads = [threading.Thread(target=say, args=key) for key in alone]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for key, reference in alone.items():
        assert np.array_equal(first[key], reference), f"{key[0]} differs from a mesh serving only that voice"
    # Now each voice's sentences are cached: each voice answers from its own entries.
    for voice, other in ((BUILT.name, DEFAULT_VOICE_NAME), (DEFAULT_VOICE_NAME, BUILT.name)):
        hits = metric_sum(mesh.gateway_metrics("gateway"), "tts_gateway_cache_operations_total", outcome="hit")
        again = speak(address, TEXTS[0], voice=voice).samples
        assert metric_sum(mesh.gateway_metrics("gateway"), "tts_gateway_cache_operations_total", outcome="hit") > hits
        assert again.shape == first[(voice, TEXTS[0])].shape, f"{voice} was answered with another voice's cached sentences"
        assert again.shape != first[(other, TEXTS[0])].shape or not np.array_equal(again, first[(other, TEXTS[0])])


@pytest.mark.parametrize("kind", ["acoustic", "vocoder"])
def test_a_killed_worker_s_stream_resumes_on_a_worker_that_loads_the_voice_with_audio_unchanged(
    mesh: ZoneMesh, alone: dict, kind: str
) -> None:
    address = mesh.gateways["gateway"].address
    text = unique(LONG_TEXT)
    mesh.flush_redis()
    reference = speak(address, text, voice=BUILT.name).samples  # from zone-b, which holds the voice
    mesh.flush_redis()
    resumes_before = metric_sum(mesh.gateway_metrics("gateway"), "tts_gateway_resumes_total", kind=kind)
    inside = []

    def kill_on_first_audio(count: int, response: tts_pb2.SynthesizeResponse) -> None:
        if count == 1:
            inside.append(not response.sentence_end)
            mesh.kill_worker(kind, "zone-b")

    try:
        spoken = speak(address, text, voice=BUILT.name, on_audio=kill_on_first_audio, timeout_s=120)
        assert inside == [True], "the kill did not land inside a sentence"
        assert metric_sum(mesh.gateway_metrics("gateway"), "tts_gateway_resumes_total", kind=kind) > resumes_before
        assert np.array_equal(spoken.samples, reference), "the resumed stream's audio differs"
        assert BUILT.name in _loaded(mesh, kind, "zone-a"), "the stream did not move to zone-a, which had to load the voice"
        loads = metric_sum(mesh.worker_metrics(kind, "zone-a"), f"tts_{kind}_voice_changes_total", change="load", voice=BUILT.name)
        assert loads == 1, "a voice is loaded once however many streams ask for it"
    finally:
        mesh.restart_worker(kind, "zone-b")
