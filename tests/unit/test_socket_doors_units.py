"""The pure parts of the WebSocket and Wyoming doors: what a listener heard, characters' times, both
dialects' reading of messages, ElevenLabs' output formats, and Wyoming events read within bounds."""

from __future__ import annotations

import asyncio
import json

import grpc
import pytest

from libs.pb.tts.v1 import tts_pb2
from libs.serving.http_errors import HttpError
from libs.serving.wyoming import MAX_PAYLOAD_BYTES, WyomingProtocolError, read_event
from libs.synthesis.output import WordTime
from libs.synthesis.transcript import Transcript, ms
from libs.voice.registry import default_registry
from services.gateway.elevenlabs_socket import ElevenLabsDialect, output_format, speech_options
from services.gateway.socket_commands import Cancel, Close, Flush, KeepAlive, Text
from services.gateway.socket_dialect import OurDialect, parse_start
from services.gateway.wyoming_door import info_event, options_for

SENT = ("Hello, wor", "ld! How are ", "you today?")
WORDS = (WordTime("Hello", 0.0, 0.31), WordTime("world", 0.31, 0.7), WordTime("How", 0.9, 1.05),
         WordTime("are", 1.05, 1.2), WordTime("you", 1.2, 1.4), WordTime("today", 1.4, 1.9))  # fmt: skip


def _transcript() -> Transcript:
    transcript = Transcript()
    for piece in SENT:
        transcript.add_text(piece)
    transcript.add_words(WORDS[:2])
    transcript.add_words(WORDS[2:])
    return transcript


def test_heard_text_ends_with_the_last_word_whose_audio_ended_by_the_played_time() -> None:
    transcript = _transcript()
    assert transcript.heard(ms(0.7)).text == "Hello, world!"  # a word that ended exactly then counts, with its punctuation
    assert [word.text for word in transcript.heard(ms(0.7)).words] == ["Hello", "world"]
    assert transcript.heard(ms(0.7) - 0.001).text == "Hello,"
    assert transcript.heard(0.0).text == "" and transcript.heard(0.0).words == ()
    assert transcript.heard(5000.0).text == "Hello, world! How are you today?"


def test_characters_get_times_that_cover_the_text_sent_in_order() -> None:
    transcript = Transcript()
    for piece in SENT:
        transcript.add_text(piece)
    transcript.add_words(WORDS[:2])
    first = transcript.char_times(WORDS[:2])
    transcript.add_words(WORDS[2:])
    second = transcript.char_times(WORDS[2:])
    assert "".join(first.chars + second.chars) == "".join(SENT)
    starts = first.start_ms + second.start_ms
    assert list(starts) == sorted(starts)
    assert starts["".join(SENT).index("How")] == ms(0.9)  # a word's first character starts with it
    assert len(first.chars) == len(first.start_ms) == len(first.duration_ms)


def test_our_dialect_reads_each_message_and_names_the_field_at_fault() -> None:
    dialect = OurDialect(parse_start({"type": "start", "voice": "alloy", "response_format": "mulaw"}))
    assert dialect.commands({"type": "text", "text": "Hi ", "context_id": "a", "flush": True}) == [Text("a", "Hi ", True, "")]
    assert dialect.commands({"type": "flush"}) == [Flush("0")]
    assert dialect.commands({"type": "close"}) == [Close(None)]
    assert dialect.commands({"type": "cancel", "context_id": "a", "played_ms": 812.5}) == [Cancel("a", 812.5)]
    assert dialect.commands({"type": "keep_alive"}) == [KeepAlive()]
    with pytest.raises(HttpError) as unknown:
        dialect.commands({"type": "speak"})
    assert unknown.value.param == "type"
    with pytest.raises(HttpError) as negative:
        dialect.commands({"type": "cancel", "played_ms": -1})
    assert negative.value.param == "played_ms"
    with pytest.raises(HttpError) as bad_start:
        parse_start({"type": "start", "speed": "fast"})
    assert bad_start.value.param == "speed" and bad_start.value.grpc_code == grpc.StatusCode.INVALID_ARGUMENT


def test_the_start_message_takes_the_http_bodys_rules_and_frames() -> None:
    options = parse_start({"type": "start", "response_format": "mulaw", "frame_ms": 20}).socket_options(default_registry())
    assert (options.encoding, options.sample_rate_hz, options.frame_ms) == (tts_pb2.MULAW, 8000, 20)
    with pytest.raises(HttpError) as unknown:
        parse_start({"type": "start", "stream_format": "sse"})  # a parameter this route does not take
    assert unknown.value.param == "stream_format"


def test_elevenlabs_output_formats_map_to_encodings_and_rates() -> None:
    assert output_format("pcm_16000") == (tts_pb2.LINEAR_PCM, 16000)
    assert output_format("ulaw_8000") == (tts_pb2.MULAW, 8000)
    assert output_format("alaw_8000") == (tts_pb2.ALAW, 8000)
    assert output_format("mp3_44100_128") == (tts_pb2.MP3, 44100)
    assert output_format("opus_48000_64") == (tts_pb2.OGG_OPUS, 48000)
    for refused in ("ulaw_16000", "wav_44100", "pcm_4000", "pcm_" + "1" * 5000, "pcm_\u00b2"):
        with pytest.raises(HttpError) as error:
            output_format(refused)
        assert error.value.param == "output_format"


def test_an_elevenlabs_speech_body_names_what_is_wrong_with_its_text() -> None:
    registry = default_registry()
    assert speech_options(registry, "any-id", {}, {"text": "Hi."})[0] == "Hi."
    for body, code in (({"text": 5}, "invalid_type"), ({}, "missing_required_parameter"), ({"text": ""}, "missing_required_parameter")):
        with pytest.raises(HttpError) as error:
            speech_options(registry, "any-id", {}, body)
        assert error.value.param == "text" and error.value.code == code


@pytest.mark.parametrize(
    ("voice_settings", "param"),
    [("fast", "voice_settings"), ([1.2], "voice_settings"), ({"speed": "1.2"}, "voice_settings.speed"), ({"speed": True}, "voice_settings.speed")],
)
def test_elevenlabs_voice_settings_that_are_not_an_object_or_a_speed_that_is_no_number_are_refused(voice_settings, param) -> None:  # type: ignore[no-untyped-def]
    registry = default_registry()
    assert speech_options(registry, "any-id", {}, {"text": "Hi.", "voice_settings": {"speed": 1.2, "stability": 0.5}})[1].speed == 1.2
    assert speech_options(registry, "any-id", {}, {"text": "Hi.", "voice_settings": None})[1].speed == 1.0
    with pytest.raises(HttpError) as refused:
        speech_options(registry, "any-id", {}, {"text": "Hi.", "voice_settings": voice_settings})
    with pytest.raises(HttpError) as refused_on_the_socket:
        ElevenLabsDialect(multi=False).commands({"text": " ", "voice_settings": voice_settings})
    assert refused.value.param == refused_on_the_socket.value.param == param
    assert refused.value.code == "invalid_type"


def test_elevenlabs_messages_read_as_commands_in_both_routes() -> None:
    single = ElevenLabsDialect(multi=False)
    assert single.commands({"text": " ", "voice_settings": {"speed": 1.1}}) == [Text("", " ", speed=1.1)]
    assert single.commands({"text": "Hello ", "try_trigger_generation": True}) == [Text("", "Hello ")]
    assert single.commands({"text": "world. ", "flush": True}) == [Text("", "world. ", flush=True)]
    assert single.commands({"text": ""}) == [Close(None)]  # end of stream: the rest, then the socket closes
    multi = ElevenLabsDialect(multi=True)
    assert multi.commands({"text": " ", "context_id": "c1", "voice_settings": {}}) == [Text("c1", " ")]
    assert multi.commands({"text": "", "context_id": "c1", "flush": True}) == [Text("c1", "", flush=True)]
    assert multi.commands({"context_id": "c1", "close_context": True}) == [Close("c1")]
    assert multi.commands({"close_socket": True}) == [Close(None)]
    assert multi.commands({"context_id": "c1", "keep_alive": True}) == [KeepAlive()]
    assert multi.done("c1", 1.0) == {"isFinal": True, "contextId": "c1", "context_id": "c1"}


def _reader(data: bytes) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    return reader


async def test_wyoming_events_are_read_with_their_data_and_refused_past_their_bounds_before_reading() -> None:
    data = json.dumps({"text": "Hello."}).encode()
    header = json.dumps({"type": "synthesize", "data_length": len(data)}).encode() + b"\n"
    event = await read_event(_reader(header + data))
    assert event is not None and event.type == "synthesize" and event.data == {"text": "Hello."}
    claim = json.dumps({"type": "audio-chunk", "payload_length": MAX_PAYLOAD_BYTES + 1}).encode() + b"\n"
    with pytest.raises(WyomingProtocolError, match="payload_length"):
        await read_event(_reader(claim))  # refused on the header: the gigabyte is never read
    with pytest.raises(WyomingProtocolError):
        await read_event(_reader(b"not json\n"))
    with pytest.raises(WyomingProtocolError, match="too deeply"):
        await read_event(_reader(b"[" * 30_000 + b"\n"))  # within the line's bound, past the parser's stack
    deep = b"[" * 30_000 + b"]" * 30_000
    with pytest.raises(WyomingProtocolError, match="event's data nests"):
        await read_event(_reader(json.dumps({"type": "synthesize", "data_length": len(deep)}).encode() + b"\n" + deep))
    assert await read_event(_reader(b"")) is None


def test_wyoming_info_lists_every_voice_and_streaming_and_voices_resolve_by_name_or_language() -> None:
    registry = default_registry()
    info = info_event(registry, "1.0").data["tts"][0]
    assert info["supports_synthesize_streaming"] is True
    assert [voice["name"] for voice in info["voices"]] == [voice.name for voice in registry.voices()]
    assert "en_US" in info["voices"][0]["languages"]
    from wyoming.tts import SynthesizeVoice

    assert options_for(registry, SynthesizeVoice(language="en_US")).voice.name == registry.default_name
    assert options_for(registry, None).encoding == tts_pb2.LINEAR_PCM
