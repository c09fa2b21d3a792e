"""A client whose connection drops mid-utterance resumes from its last resume token and the joined
audio is the uninterrupted stream's, sample for sample: from Python (grpcio) and from Node.js
(grpc-js), each through a TCP proxy that cuts every connection on both sides, as a switching
mobile network does."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import threading
from collections.abc import Iterator

import grpc
import pytest

from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc
from tests.support.faults.proxy import ThreadedFaultProxy
from tests.support.mesh import REPO_ROOT, Mesh

TEXT = (
    "A phone on a train loses its network now and then. The stream breaks in the middle of a word. "
    "The app calls again with the token of the last piece it has. It hears the rest without a gap."
)
GRPCJS_CLIENT = REPO_ROOT / "tests" / "support" / "grpcjs" / "dist" / "resume_client.cjs"
NODE = shutil.which("node")
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]
"""Each channel opens its own connection: channels of one process to one address otherwise share it,
and a channel opened just after the cut could be handed the connection the cut reset before gRPC
had noticed (the reconnect then failed with "Stream removed (sendmsg: Broken pipe)" once in a full
run), where an app that reconnects after a network change dials anew."""


def _uninterrupted(mesh: Mesh, **fields: object) -> bytes:
    with grpc.insecure_channel(mesh.gateway_address) as channel:
        stub = tts_pb2_grpc.TextToSpeechStub(channel)
        return b"".join(r.audio for r in stub.Synthesize(tts_pb2.SynthesizeRequest(text=TEXT, **fields), timeout=120))


@pytest.mark.parametrize(("encoding", "rate_hz"), [(tts_pb2.LINEAR_PCM, 0), (tts_pb2.MULAW, 8000)])
def test_python_client_cut_mid_utterance_resumes_sample_for_sample(mesh: Mesh, encoding: int, rate_hz: int) -> None:
    whole = _uninterrupted(mesh, encoding=encoding, sample_rate_hz=rate_hz)
    received = b""
    token = ""
    with ThreadedFaultProxy(mesh.gateway_address) as proxy:
        with grpc.insecure_channel(proxy.address, options=OWN_CONNECTION) as channel:
            stub = tts_pb2_grpc.TextToSpeechStub(channel)
            responses = stub.Synthesize(tts_pb2.SynthesizeRequest(text=TEXT, encoding=encoding, sample_rate_hz=rate_hz), timeout=120)
            with pytest.raises(grpc.RpcError) as broken:
                for number, response in enumerate(responses):
                    received += response.audio
                    token = response.resume_point.token
                    if number == 2:
                        proxy.cut()  # the network goes away mid-utterance
        assert broken.value.code() == grpc.StatusCode.UNAVAILABLE
        assert 0 < len(received) < len(whole)
        # The app reconnects on a connection of its own and goes on from its token.
        with grpc.insecure_channel(proxy.address, options=OWN_CONNECTION) as channel:
            stub = tts_pb2_grpc.TextToSpeechStub(channel)
            request = tts_pb2.SynthesizeRequest(text=TEXT, encoding=encoding, sample_rate_hz=rate_hz, resume_token=token)
            rest = list(stub.Synthesize(request, timeout=120))
    assert received + b"".join(r.audio for r in rest) == whole
    assert rest[0].audio_offset_s == pytest.approx(len(received) / (2 if encoding == tts_pb2.LINEAR_PCM else 1) / rest[0].sample_rate_hz)


@pytest.mark.skipif(NODE is None or not GRPCJS_CLIENT.exists(), reason="needs Node.js (`apt-get install nodejs`; .ci/run installs it)")
def test_grpc_js_client_cut_mid_utterance_resumes_sample_for_sample(mesh: Mesh) -> None:
    whole = _uninterrupted(mesh)
    with ThreadedFaultProxy(mesh.gateway_address) as proxy:
        client = subprocess.Popen(
            [str(NODE), str(GRPCJS_CLIENT), proxy.address, str(REPO_ROOT / "protos"), TEXT],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        lines: list[dict[str, object]] = []
        assert client.stdout is not None
        timer = threading.Timer(120, client.kill)
        timer.start()
        try:
            for line in client.stdout:
                lines.append(json.loads(line))
                if sum("audio" in entry for entry in lines) == 3 and not any("broken" in entry for entry in lines):
                    proxy.cut()  # the network goes away after the third piece
            client.wait()
        finally:
            timer.cancel()
    assert client.returncode == 0, client.stderr.read() if client.stderr else ""
    broken = [entry["broken"] for entry in lines if "broken" in entry]
    assert broken == [grpc.StatusCode.UNAVAILABLE.value[0]]  # one drop, then the resumed call ran to its end
    assert lines[-1] == {"done": 2}
    audio = b"".join(base64.b64decode(str(entry["audio"])) for entry in lines if "audio" in entry)
    assert audio == whole


def test_resume_token_of_another_text_is_refused(mesh: Mesh) -> None:
    with grpc.insecure_channel(mesh.gateway_address) as channel:
        stub = tts_pb2_grpc.TextToSpeechStub(channel)
        token = list(stub.Synthesize(tts_pb2.SynthesizeRequest(text="One sentence here. Another one there."), timeout=120))[1]
        with pytest.raises(grpc.RpcError) as refused:
            list(stub.Synthesize(tts_pb2.SynthesizeRequest(text="Something else entirely.", resume_token=token.resume_point.token), timeout=120))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "another text" in (refused.value.details() or "")




def test_streaming_synthesize_resumes_from_a_token_given_the_same_pieces(mesh: Mesh) -> None:
    pieces = ["A streamed text ", "can be resumed too. ", "The client sends ", "the same pieces again."]

    def requests(token: str = "") -> Iterator[tts_pb2.StreamingSynthesizeRequest]:
        yield tts_pb2.StreamingSynthesizeRequest(config=tts_pb2.StreamingSynthesizeConfig(encoding=tts_pb2.ALAW, resume_token=token))
        for piece in pieces:
            yield tts_pb2.StreamingSynthesizeRequest(text=piece)

    with grpc.insecure_channel(mesh.gateway_address) as channel:
        stub = tts_pb2_grpc.TextToSpeechStub(channel)
        whole = list(stub.StreamingSynthesize(requests(), timeout=120))
        cut = len(whole) // 2
        rest = list(stub.StreamingSynthesize(requests(whole[cut - 1].resume_point.token), timeout=120))
    assert b"".join(r.audio for r in whole[:cut] + rest) == b"".join(r.audio for r in whole)
