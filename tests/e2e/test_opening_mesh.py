"""A long first sentence starts with its opening spoken as a sentence of its own, on the real mesh: its
first audio waits for the opening's plan, not the whole sentence's. Later sentences, and a short
first one, are spoken whole; the audio is continuous either way."""

from __future__ import annotations

import uuid

import grpc

from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc
from tests.support.mesh import Mesh

LONG_FIRST = (
    "On the morning of the third of March, long before the market opened, the old baker had already lit his "
    "ovens, swept the floor twice and set out the bread for the neighbours who came before work."
)
LONG_LATER = (
    "When the storm finally reached the coast late on Friday evening, the harbour master ordered every small "
    "boat back to the pier, and the fishermen tied their nets down before the first waves broke."
)


def _sentences(mesh: Mesh, text: str) -> list[str]:
    with grpc.insecure_channel(mesh.gateway_address) as channel:
        stub = tts_pb2_grpc.TextToSpeechStub(channel)
        request = tts_pb2.SynthesizeRequest(text=text, encoding=tts_pb2.LINEAR_PCM, request_id=uuid.uuid4().hex)
        answers = list(stub.Synthesize(request, timeout=120))
    assert sum(len(answer.audio) for answer in answers) > 0
    return [answer.sentence.text for answer in answers if answer.HasField("sentence")]


def test_a_long_first_sentence_is_spoken_opening_first_and_later_ones_whole(mesh: Mesh) -> None:
    spoken = _sentences(mesh, f"{LONG_FIRST} {LONG_LATER}")
    # The opening: the leading clauses, cut at espeak-ng's clause boundaries (after a comma).
    assert len(spoken) >= 3, spoken
    assert LONG_FIRST.startswith(spoken[0].rstrip(",")) and spoken[0].endswith(","), spoken
    assert " ".join(spoken[:-1]) == LONG_FIRST  # the first sentence, all of it, in its pieces
    assert spoken[-1] == LONG_LATER  # a later sentence has the first's audio as slack: whole
    # A short first sentence is spoken whole.
    assert _sentences(mesh, "Hello there. How are you today?") == ["Hello there.", "How are you today?"]
