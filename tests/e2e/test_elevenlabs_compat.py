"""ElevenLabs' input streaming on the real gateway, driven by a real third-party client, LiveKit
Agents' ElevenLabs plugin (`livekit-plugins-elevenlabs`), unchanged but for its base URL: it speaks
through us over the multi-context socket and its word timings, made from our character alignment,
are our word timestamps; the single-context route answers ElevenLabs' own message shapes in mu-law."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import aiohttp
import grpc
import pytest
from livekit.agents.types import USERDATA_TIMED_TRANSCRIPT
from livekit.plugins import elevenlabs
from websockets.sync.client import connect

from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc
from tests.support.mesh import Mesh

TEXT = "Hello from an agent. It speaks through the mesh."
ELEVENLABS_VOICE_ID = "21m00Tcm4TlvDq8ikWAM"  # an ElevenLabs voice id: speaks with the default voice


def _grpc(mesh: Mesh, text: str, **fields: Any) -> list[tts_pb2.SynthesizeResponse]:
    with grpc.insecure_channel(mesh.gateway_address) as channel:
        return list(tts_pb2_grpc.TextToSpeechStub(channel).Synthesize(tts_pb2.SynthesizeRequest(text=text, **fields), timeout=120))


def test_the_livekit_elevenlabs_plugin_speaks_through_us_with_our_word_timings(mesh: Mesh) -> None:
    async def run() -> tuple[bytes, list[Any]]:
        async with aiohttp.ClientSession() as session:
            tts = elevenlabs.TTS(
                api_key="unused", base_url=f"{mesh.http_url}/v1", voice_id=ELEVENLABS_VOICE_ID, encoding="pcm_22050", http_session=session
            )
            stream = tts.stream()
            for word in TEXT.split():
                stream.push_text(word + " ")
            stream.flush()
            stream.end_input()
            audio = bytearray()
            timed: list[Any] = []
            async for event in stream:
                audio += bytes(event.frame.data.cast("B"))
                timed += event.frame.userdata.get(USERDATA_TIMED_TRANSCRIPT, [])
            await stream.aclose()
            await tts.aclose()
            return bytes(audio), timed

    audio, timed = asyncio.run(asyncio.wait_for(run(), 120))
    responses = _grpc(mesh, TEXT)
    reference = b"".join(response.audio for response in responses)
    assert len(audio) >= len(reference) > 0
    assert audio[: len(reference)] == reference  # the plugin pads its last frame with silence
    assert set(audio[len(reference) :]) <= {0}
    words = [w for r in responses if r.HasField("sentence") for w in r.sentence.words]
    assert [str(t).strip().strip(".") for t in timed] == [w.text for w in words]
    assert [t.start_time for t in timed] == pytest.approx([w.start_s for w in words], abs=0.0015)


def test_the_single_context_route_answers_elevenlabs_messages_in_mulaw(mesh: Mesh) -> None:
    url = mesh.http_url.replace("http://", "ws://") + f"/v1/text-to-speech/{ELEVENLABS_VOICE_ID}/stream-input?output_format=ulaw_8000"
    messages: list[dict[str, Any]] = []
    with connect(url, additional_headers={"xi-api-key": "unused"}) as socket:
        socket.send(json.dumps({"text": " ", "voice_settings": {"stability": 0.5, "similarity_boost": 0.8}}))
        socket.send(json.dumps({"text": "Hello from an agent. ", "try_trigger_generation": True}))
        socket.send(json.dumps({"text": "It speaks through the mesh. ", "flush": True}))
        socket.send(json.dumps({"text": ""}))
        while not (messages and messages[-1].get("isFinal")):
            messages.append(json.loads(socket.recv(timeout=60)))
    audio = b"".join(base64.b64decode(m["audio"]) for m in messages if m.get("audio"))
    assert audio == b"".join(r.audio for r in _grpc(mesh, TEXT, encoding=tts_pb2.MULAW))
    alignments = [m["alignment"] for m in messages if m.get("alignment")]
    assert "".join(char for a in alignments for char in a["chars"]).strip() == TEXT
    for alignment in alignments:
        assert len(alignment["chars"]) == len(alignment["charStartTimesMs"]) == len(alignment["charDurationsMs"])
    assert messages[-1] == {"isFinal": True}


def test_the_livekit_plugins_whole_text_call_gets_our_audio(mesh: Mesh) -> None:
    async def run() -> bytes:
        async with aiohttp.ClientSession() as session:
            tts = elevenlabs.TTS(api_key="unused", base_url=f"{mesh.http_url}/v1", encoding="pcm_22050", http_session=session)
            audio = bytearray()
            async for event in tts.synthesize(TEXT):
                audio += bytes(event.frame.data.cast("B"))
            await tts.aclose()
            return bytes(audio)

    audio = asyncio.run(asyncio.wait_for(run(), 120))
    reference = b"".join(response.audio for response in _grpc(mesh, TEXT))
    assert audio[: len(reference)] == reference and not any(audio[len(reference) :])
