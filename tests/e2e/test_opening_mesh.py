"""A long first sentence starts with its opening spoken as a sentence of its own, on the real mesh with
its defaults: its first audio waits for the opening's plan, not the whole sentence's, and the rest is
the whole sentence's plan from the pause after the opening on. Later sentences, and a first one without
a clause to open with, are spoken whole; the audio is continuous either way. A stream that starts alone
opens a shorter first sentence too, and a resume of it is cut as it was, whatever else is playing then."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import grpc
import pytest

from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc
from tests.support.mesh import NO_REALTIME_ADMISSION, Mesh

# Each under --max-sentence-ids (400), so only the opening cuts them: 279 and 269 phoneme ids, over
# twice the default opening's 96 (libs.text.long_sentences.OPENING_AFTER).
LONG_FIRST = (
    "On the morning of the third of March, long before the market opened, the old baker had already lit his "
    "ovens and swept the floor."
)
LONG_LATER = (
    "When the storm finally reached the coast late on Friday evening, the harbour master ordered every small "
    "boat back to the pier."
)

# 153 phoneme ids and no clause boundary: more than the opening's 96 but under twice it.
ORDINARY_FIRST = "Fields of frost slid past the window while most of the carriage slept."
# 197 phoneme ids with a clause boundary: over twice the opening (PART_OPENING_AFTER).
CLAUSED_FIRST = "When the rain stopped, we walked down to the harbour to watch the boats come in before dark."
# 169 phoneme ids with a clause boundary: under twice the opening, over one and a half times it
# (EAGER_PART_OPENING_AFTER): opened only for a stream that starts alone.
ORDINARY_CLAUSED_FIRST = "When the rain stopped, we walked down to the harbour to watch the boats come in."


@pytest.fixture(scope="module")
def unopened_mesh(mesh: Mesh, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    """A gateway with openings off (`--opening-max-ids 0`), on the session mesh's workers."""
    running = Mesh(log_dir=tmp_path_factory.mktemp("unopened-mesh"), gateway_args=["--opening-max-ids", "0"], workers_of=mesh).start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def quiet_mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    """The mesh with its defaults but no background work (no jobs, no promoted sentences kept warm),
    so that a stream alone on it is alone: the warmer's own streams count as company. Real-time
    admission is off: these tests play a second stream beside the first, which a mesh on a small
    machine (a quarter of a fast one plays one listener) rightly refuses."""
    env = {"TTS_JOB_RUNNERS": "0", "TTS_PROMOTE_AFTER": "0", **NO_REALTIME_ADMISSION}
    running = Mesh(log_dir=tmp_path_factory.mktemp("quiet-mesh"), env=env).start()
    try:
        yield running
    finally:
        running.stop()


def _answers(mesh: Mesh, text: str) -> list[tts_pb2.SynthesizeResponse]:
    with grpc.insecure_channel(mesh.gateway_address) as channel:
        stub = tts_pb2_grpc.TextToSpeechStub(channel)
        request = tts_pb2.SynthesizeRequest(text=text, encoding=tts_pb2.LINEAR_PCM, request_id=uuid.uuid4().hex, include_alignment=True)
        return list(stub.Synthesize(request, timeout=120))


def _spoken(mesh: Mesh, text: str) -> tuple[list[str], bytes]:
    answers = _answers(mesh, text)
    audio = b"".join(answer.audio for answer in answers)
    assert audio
    return [answer.sentence.text for answer in answers if answer.HasField("sentence")], audio


def _sentences(mesh: Mesh, text: str) -> list[str]:
    return _spoken(mesh, text)[0]


def test_a_long_first_sentence_is_spoken_opening_first_and_later_ones_whole(mesh: Mesh) -> None:
    spoken = _sentences(mesh, f"{LONG_FIRST} {LONG_LATER}")
    # The opening: the leading clauses, cut at espeak-ng's clause boundaries (after a comma).
    assert len(spoken) >= 3, spoken
    assert LONG_FIRST.startswith(spoken[0].rstrip(",")) and spoken[0].endswith(","), spoken
    assert " ".join(spoken[:-1]) == LONG_FIRST  # the first sentence, all of it, in its pieces
    assert spoken[-1] == LONG_LATER  # a later sentence has the first's audio as slack: whole
    # A short first sentence is spoken whole, and so is one of ordinary length without a clause to open with.
    assert _sentences(mesh, "Hello there. How are you today?") == ["Hello there.", "How are you today?"]
    assert _sentences(mesh, f"{ORDINARY_FIRST} {LONG_LATER}") == [ORDINARY_FIRST, LONG_LATER]


def _infos(answers: list[tts_pb2.SynthesizeResponse]) -> list[tts_pb2.SentenceInfo]:
    return [answer.sentence for answer in answers if answer.HasField("sentence")]


def test_the_rest_of_an_opened_sentence_is_the_whole_sentence_from_the_pause_on(mesh: Mesh, unopened_mesh: Mesh) -> None:
    opening, rest, later = _infos(_answers(mesh, f"{CLAUSED_FIRST} {LONG_LATER}"))
    whole, whole_later = _infos(_answers(unopened_mesh, f"{CLAUSED_FIRST} {LONG_LATER}"))
    assert (opening.text, rest.text) == ("When the rain stopped,", "we walked down to the harbour to watch the boats come in before dark.")
    assert opening.phonemes + rest.phonemes == whole.phonemes
    # The rest's frames per phoneme id are the whole sentence's: the same plan, spoken from the pause on.
    assert list(rest.phoneme_frames) == list(whole.phoneme_frames)[len(opening.phoneme_frames) :]
    assert rest.phoneme_frames and list(later.phoneme_frames) == list(whole_later.phoneme_frames)


def test_the_cut_of_a_stream_alone_is_the_same_every_time(mesh: Mesh) -> None:
    # The same text is cut in the same place each time, so it is the same audio (and the same cache keys).
    text = f"{LONG_LATER} {LONG_FIRST}"
    first, second = _spoken(mesh, text), _spoken(mesh, text)
    assert first[0] == second[0] and len(first[0]) >= 3
    assert first[1] == second[1]


def test_openings_can_be_turned_off(unopened_mesh: Mesh) -> None:
    assert _sentences(unopened_mesh, f"{LONG_FIRST} {LONG_LATER}") == [LONG_FIRST, LONG_LATER]


def test_a_stream_resumed_inside_the_rest_goes_on_sample_for_sample(mesh: Mesh) -> None:
    # A text no test spoke before: the workers make both parts, and the resume reads them back (cached).
    text = f"{CLAUSED_FIRST} {uuid.uuid4().hex[:6]}."
    answers = _answers(mesh, text)
    whole = b"".join(answer.audio for answer in answers)
    in_rest = [number for number, answer in enumerate(answers) if answer.audio and answer.resume_point.token and answer.sentence_index == 1]
    assert len(in_rest) >= 3, "the rest spans several pieces"
    cut = in_rest[len(in_rest) // 2]
    received = b"".join(answer.audio for answer in answers[: cut + 1])
    with grpc.insecure_channel(mesh.gateway_address) as channel:
        stub = tts_pb2_grpc.TextToSpeechStub(channel)
        request = tts_pb2.SynthesizeRequest(text=text, encoding=tts_pb2.LINEAR_PCM, resume_token=answers[cut].resume_point.token)
        resumed = b"".join(answer.audio for answer in stub.Synthesize(request, timeout=120))
    assert received + resumed == whole


def _ticket() -> str:
    """A sentence of its own that no test spoke before (a hex suffix may be read into the sentence before it)."""
    return f"Ticket {uuid.uuid4().int % 10**6} is ready."


def _alone(mesh: Mesh) -> None:
    """Until the gateway holds no stream (a cancelled one lets go of its place a moment after the client)."""
    deadline = time.monotonic() + 30
    while mesh.metrics("gateway").get("tts_gateway_inflight_streams", 0) > 0:
        assert time.monotonic() < deadline, "the gateway still holds a stream after 30 s"
        time.sleep(0.05)


@contextmanager
def _another_stream_playing(mesh: Mesh) -> Iterator[None]:
    """A stream of another text open on the mesh (its first audio read, the rest still being made: a
    text no test spoke before, so that none of it is cached)."""
    text = f"{_ticket()} {LONG_LATER} {LONG_FIRST} {_ticket()}"
    with grpc.insecure_channel(mesh.gateway_address) as channel:
        stub = tts_pb2_grpc.TextToSpeechStub(channel)
        request = tts_pb2.SynthesizeRequest(text=text, encoding=tts_pb2.LINEAR_PCM)
        call = stub.Synthesize(request, timeout=120)
        try:
            assert next(answer for answer in call if answer.audio)
            yield
        finally:
            call.cancel()


def test_a_stream_alone_opens_sooner_and_one_beside_another_is_spoken_whole(quiet_mesh: Mesh) -> None:
    mesh = quiet_mesh
    _alone(mesh)
    alone = _sentences(mesh, f"{ORDINARY_CLAUSED_FIRST} {_ticket()}")
    assert alone[:2] == ["When the rain stopped,", "we walked down to the harbour to watch the boats come in."]
    with _another_stream_playing(mesh):
        beside = _sentences(mesh, f"{ORDINARY_CLAUSED_FIRST} {_ticket()}")
    assert beside[0] == ORDINARY_CLAUSED_FIRST


def test_a_stream_opened_alone_resumes_cut_as_it_was_beside_another(quiet_mesh: Mesh) -> None:
    mesh = quiet_mesh
    text = f"{ORDINARY_CLAUSED_FIRST} {_ticket()}"
    _alone(mesh)
    answers = _answers(mesh, text)
    assert _infos(answers)[0].text == "When the rain stopped,"  # opened: the stream was alone
    whole = b"".join(answer.audio for answer in answers)
    in_rest = [number for number, answer in enumerate(answers) if answer.audio and answer.resume_point.token and answer.sentence_index == 1]
    cut = in_rest[len(in_rest) // 2]
    received = b"".join(answer.audio for answer in answers[: cut + 1])
    with _another_stream_playing(mesh), grpc.insecure_channel(mesh.gateway_address) as channel:
        stub = tts_pb2_grpc.TextToSpeechStub(channel)
        request = tts_pb2.SynthesizeRequest(text=text, encoding=tts_pb2.LINEAR_PCM, resume_token=answers[cut].resume_point.token)
        resumed = b"".join(answer.audio for answer in stub.Synthesize(request, timeout=120))
    assert received + resumed == whole
