"""`POST /v1/audio/phonemes` on the HTTP door's route, with real text processes: a voice or a
language alone, Mandarin pinyin, SSML read as it is spoken (not its markup), and OpenAI-shaped errors
that name what is known."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from starlette.applications import Starlette

from libs.synthesis.phoneme_reading import PhonemeReader
from libs.synthesis.text_side import TextLimits
from libs.telemetry.metrics import GatewayMetrics
from libs.text.frontend import TextFrontend
from libs.text.phonemizer_pool import PhonemizerPool
from libs.text.reading import ReadingRules
from libs.voice.registry import default_registry
from services.gateway.phonemes_http import PHONEMES_PATH, phoneme_routes

MAX_BODY_BYTES = 4096


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    pool = PhonemizerPool(1, 30.0)
    reader = PhonemeReader(pool, default_registry(), 5000, TextLimits())
    app = Starlette(routes=phoneme_routes(reader, GatewayMetrics(), MAX_BODY_BYTES))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://door") as http:
        yield http
    await pool.close()


async def test_a_language_alone_reads_mandarin_with_pinyin_per_character(client: httpx.AsyncClient) -> None:
    answer = await client.post(PHONEMES_PATH, json={"input": "我去银行。他在行走。", "language": "zh-CN"})
    assert answer.status_code == 200
    body = answer.json()
    assert (body["voice"], body["language"], body["espeak_voice"], body["front_end"]) == (None, "zh-CN", "cmn", "mandarin")
    assert [s["pinyin"] for s in body["sentences"]] == ["wo3 qu4 yin2 hang2", "ta1 zai4 xing2 zou3"]
    assert all(s["phonemes"] and s["phoneme_ids"] for s in body["sentences"])


async def test_bcp47_tags_zh_and_en_are_accepted_in_any_case(client: httpx.AsyncClient) -> None:
    for tag, espeak_voice in (("zh", "cmn"), ("ZH-cn", "cmn"), ("en", "en-us"), ("en-US", "en-us")):
        answer = await client.post(PHONEMES_PATH, json={"input": "Hi.", "language": tag})
        assert answer.status_code == 200, tag
        assert answer.json()["espeak_voice"] == espeak_voice


async def test_a_voice_reads_as_its_synthesis_does(client: httpx.AsyncClient) -> None:
    voice = default_registry().default
    text = "It costs $3.50. Read it again!"
    answer = await client.post(PHONEMES_PATH, json={"input": text, "voice": voice.name})
    assert answer.status_code == 200
    limits = TextLimits()
    local = TextFrontend(
        voice.phoneme_id_map(), voice.espeak_voice, max_phoneme_ids=limits.max_sentence_ids,
        reading=ReadingRules(written_forms=limits.read_written_forms, heteronyms=limits.read_heteronyms),
    )  # fmt: skip
    expected = [s for chunk in local.chunks(text) for s in local.chunk_sentences(chunk)]
    body = answer.json()
    assert body["voice"] == voice.name and body["front_end"] == "espeak"
    assert [s["phoneme_ids"] for s in body["sentences"]] == [list(s.phoneme_ids) for s in expected]
    assert "pinyin" not in body["sentences"][0]


@pytest.mark.parametrize(
    ("body", "param", "says"),
    [
        ({"input": "hi", "language": "tlh"}, "language", "known languages: en, en-US, en-GB, zh, zh-CN"),
        ({"input": "hi", "voice": "nobody"}, "voice", "en_US-joe-medium"),
        ({"input": "hi"}, "voice", "give `voice`"),
        ({"input": "hi", "voice": "en_US-joe-medium", "language": "en"}, "voice", "not both"),
        ({"language": "zh"}, "input", "`input` is required"),
        ({"input": 3, "language": "zh"}, "input", "must be a string"),
    ],
)
async def test_a_bad_request_is_refused_with_an_openai_shaped_error(client: httpx.AsyncClient, body: dict, param: str, says: str) -> None:
    answer = await client.post(PHONEMES_PATH, json=body)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert says in error["message"]


async def test_text_with_nothing_to_say_and_a_body_over_the_limit_are_refused(client: httpx.AsyncClient) -> None:
    empty = await client.post(PHONEMES_PATH, json={"input": "。！", "language": "zh"})
    assert empty.status_code == 400
    large = await client.post(PHONEMES_PATH, json={"input": "好" * MAX_BODY_BYTES, "language": "zh"})
    assert large.status_code == 413


async def test_ssml_is_read_as_it_is_spoken_not_as_its_markup(client: httpx.AsyncClient) -> None:
    voice = default_registry().default.name
    document = '<speak>Hello <break time="300ms"/> there. <say-as interpret-as="characters">tv</say-as> time.</speak>'
    answer = await client.post(PHONEMES_PATH, json={"input": document, "voice": voice})
    assert answer.status_code == 200
    texts = [s["text"] for s in answer.json()["sentences"]]
    assert " ".join(texts).split() == ["Hello", "there.", "T", "V", "time."]
    assert not any("speak" in s["phonemes"] or "<" in s["text"] for s in answer.json()["sentences"])
    refused = await client.post(PHONEMES_PATH, json={"input": "<speak><audio src='x'/></speak>", "voice": voice})
    assert refused.status_code == 400 and "<audio>" in refused.json()["error"]["message"]
