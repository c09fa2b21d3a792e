"""The gateway's text side against hostile text, through the real mesh (real processes, sockets,
Redis): espeak-ng never runs in the gateway, a text that crashes it fails alone, a stream of spaces
does not stall the event loop, and mixed scripts are spoken in pieces of bounded size."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import grpc
import numpy as np
import pytest

from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc
from tests.support.client import collect, synthesize
from tests.support.gateway_process import extra_gateway
from tests.support.mesh import Mesh

MAX_SENTENCE_IDS = 400  # the gateway's default --max-sentence-ids
CRASHING_TEXT = "s'" * 220  # one word of 220 stacked "'s": espeak-ng 1.52 aborts on it
MIXED_SCRIPTS = "😀 مرحبا 你好 привет ש Hello " * 40
# Generous: before, a ListVoices behind the stream of spaces waited 30 s; a healthy loop answers in ms.
LOOP_STALL_BOUND_S = 5.0
# Generous: before, the acoustic worker took ~28 s (and +4 GB) on the mixed text's one sentence.
FIRST_AUDIO_BOUND_S = 10.0


def _unique(text: str) -> str:
    return f"{text} Request {uuid.uuid4().int % 100000}."


def _maps(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


def _children(pid: int) -> list[int]:
    children = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines() if ":\t" in line)
        except OSError:  # the process ended meanwhile
            continue
        if fields.get("PPid", "").strip() == str(pid):
            children.append(int(status.parent.name))
    return children


def test_espeak_ng_runs_in_child_processes_and_never_in_the_gateway(mesh: Mesh) -> None:
    gateway = mesh.services["gateway"].process.pid
    assert "espeak" not in _maps(gateway)
    readers = [child for child in _children(gateway) if "espeak" in _maps(child)]
    assert len(readers) == 2  # --text-processes, warmed up before the gateway said SERVING


def test_a_text_that_crashes_espeak_ng_fails_alone_and_the_gateway_keeps_serving(mesh: Mesh, tmp_path: Path) -> None:
    bystander = _unique("A bystander is speaking. Its second sentence follows. And a third one ends it.")
    # A gateway that hands words of any length to espeak-ng, so the crash really happens.
    with extra_gateway(mesh, tmp_path / "unguarded-gateway.log", ["--max-word-chars", "5000"]) as gateway:
        with grpc.insecure_channel(gateway.address) as channel:
            stub = tts_pb2_grpc.TextToSpeechStub(channel)
            started = time.monotonic()
            stream = stub.Synthesize(tts_pb2.SynthesizeRequest(text=bystander), timeout=120)
            first = next(stream)  # the bystander is speaking; its later sentences are phonemised later
            with pytest.raises(grpc.RpcError) as caught:
                for _ in stub.Synthesize(tts_pb2.SynthesizeRequest(text=CRASHING_TEXT), timeout=60):
                    pass
            rest = collect(stream, started)
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "crashed" in caught.value.details() and "s's" not in caught.value.details()
            assert len(caught.value.details()) < 400
            listed = stub.ListVoices(tts_pb2.ListVoicesRequest(), timeout=10)
            assert listed.voices
        assert gateway.process.poll() is None
        assert synthesize(gateway.address, "Still serving.").duration_s > 0.3
    spoken = [first, *rest.responses]
    assert {response.sentence_index for response in spoken} == {0, 1, 2, 3}  # "... Request N." is the fourth
    # Untouched: the bystander's audio is the very audio of the same text spoken alone.
    alone = synthesize(mesh.gateway_address, bystander)
    pcm = np.frombuffer(b"".join(response.audio for response in spoken), dtype="<i2")
    assert np.array_equal(pcm.astype(np.float32) / 32767.0, alone.samples)


def test_the_crashing_text_is_spoken_by_a_gateway_that_breaks_long_words(mesh: Mesh) -> None:
    spoken = synthesize(mesh.gateway_address, CRASHING_TEXT, include_alignment=True)
    assert spoken.duration_s > 1.0
    assert all(len(r.sentence.phoneme_frames) <= MAX_SENTENCE_IDS for r in spoken.responses if r.HasField("sentence"))


def test_a_stream_of_spaces_does_not_stall_the_gateway_and_speaks_what_follows(mesh: Mesh) -> None:
    stalls: list[float] = []
    done = threading.Event()

    def list_voices_meanwhile() -> None:
        with grpc.insecure_channel(mesh.gateway_address) as channel:
            stub = tts_pb2_grpc.TextToSpeechStub(channel)
            while not done.is_set():
                asked = time.monotonic()
                stub.ListVoices(tts_pb2.ListVoicesRequest(), timeout=60)
                stalls.append(time.monotonic() - asked)
                time.sleep(0.05)

    def requests():
        yield tts_pb2.StreamingSynthesizeRequest(config=tts_pb2.StreamingSynthesizeConfig())
        for _ in range(400):
            yield tts_pb2.StreamingSynthesizeRequest(text=" " * 5000)
        yield tts_pb2.StreamingSynthesizeRequest(text="a B")

    watcher = threading.Thread(target=list_voices_meanwhile)
    watcher.start()
    try:
        with grpc.insecure_channel(mesh.gateway_address) as channel:
            stub = tts_pb2_grpc.TextToSpeechStub(channel)
            spoken = collect(stub.StreamingSynthesize(requests(), timeout=120), time.monotonic())
    finally:
        done.set()
        watcher.join()
    print(f"\nListVoices during 400 x 5,000 spaces: {len(stalls)} calls, slowest {max(stalls) * 1000:.0f} ms")
    assert stalls and max(stalls) < LOOP_STALL_BOUND_S
    assert [r.sentence.text for r in spoken.responses if r.HasField("sentence")] == ["a B"]
    assert spoken.duration_s > 0.2


@pytest.mark.parametrize(
    "text",
    [
        MIXED_SCRIPTS,
        ("so i was thinking that we could go to the store and pick up some things for dinner tonight because "
         "the fridge is empty and i really do not want to order takeout again ") * 6,
    ],
    ids=["mixed-scripts", "unpunctuated"],
)  # fmt: skip
def test_long_sentences_are_spoken_in_pieces_with_bounded_first_audio(mesh: Mesh, text: str) -> None:
    text = text[:995] + f" {uuid.uuid4().int % 100000}"  # a cold cache
    rss_before = mesh.metric("acoustic", "process_resident_memory_bytes")
    with grpc.insecure_channel(mesh.gateway_address) as channel:
        stub = tts_pb2_grpc.TextToSpeechStub(channel)
        started = time.monotonic()
        call = stub.Synthesize(tts_pb2.SynthesizeRequest(text=text, include_alignment=True), timeout=300)
        first_audio_s = None
        sentences = []
        for response in call:
            if response.audio and first_audio_s is None:
                first_audio_s = time.monotonic() - started
            if response.HasField("sentence"):
                sentences.append(response.sentence)
            if len(sentences) == 4:
                break
        call.cancel()
    growth_mb = (mesh.metric("acoustic", "process_resident_memory_bytes") - rss_before) / 2**20
    print(f"\nfirst audio {first_audio_s:.3f} s; ids per sentence {[len(s.phoneme_frames) for s in sentences]}; "
          f"acoustic RSS {growth_mb:+.0f} MB")  # fmt: skip
    assert first_audio_s is not None and first_audio_s < FIRST_AUDIO_BOUND_S
    assert len(sentences) == 4 and all(0 < len(s.phoneme_frames) <= MAX_SENTENCE_IDS for s in sentences)
    assert growth_mb < 1024
