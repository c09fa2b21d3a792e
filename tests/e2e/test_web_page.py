"""The web page in a real headless Chromium, served and proxied by the real edge in front of the real
mesh: it speaks a sentence over grpc-web, the audio reaches Web Audio as it arrives and plays, each
word is highlighted in order while it is spoken, and the console stays clean; it streams a text word
by word over the WebSocket door, five words a second, playing and lighting words as audio comes, and
its stop button cancels and shows the words heard."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import grpc
import pytest

from libs.edge.envoy import EdgeSettings
from libs.edge.process import EdgeProcess
from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc
from tests.support.mesh import Mesh
from tests.support.ports import free_port

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (`apt-get install chromium`; .ci/run installs it)")
TEXT = "Every word lights up while it is spoken."
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--autoplay-policy=no-user-gesture-required",
]  # fmt: skip


@pytest.fixture(scope="module")
def page_url(mesh: Mesh) -> Iterator[str]:
    port = free_port()
    settings = EdgeSettings(
        port=port, admin_port=free_port(), gateway_grpc_port=int(mesh.gateway_address.rsplit(":", 1)[1]),
        gateway_http_port=mesh.http_port, cors_origins=(f"http://127.0.0.1:{port}",), access_log=False,
    )  # fmt: skip
    with EdgeProcess(settings):
        yield f"http://127.0.0.1:{port}/"


def _grpc_words_and_samples(mesh: Mesh) -> tuple[list[str], int]:
    with grpc.insecure_channel(mesh.gateway_address) as channel:
        stub = tts_pb2_grpc.TextToSpeechStub(channel)
        responses = list(stub.Synthesize(tts_pb2.SynthesizeRequest(text=TEXT, encoding=tts_pb2.FLOAT_PCM), timeout=60))
    words = [word.text for response in responses if response.HasField("sentence") for word in response.sentence.words]
    return words, sum(len(response.audio) for response in responses) // 4


def test_the_page_speaks_plays_and_highlights_every_word(mesh: Mesh, page_url: str) -> None:
    from playwright.sync_api import sync_playwright

    expected_words, expected_samples = _grpc_words_and_samples(mesh)
    problems: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
            page.on("pageerror", lambda error: problems.append(str(error)))
            page.goto(page_url)
            page.wait_for_function("document.querySelectorAll('#voice option').length > 0", timeout=30_000)
            # Each voice with its language, quality and sample rate, as ListVoices gives them.
            assert page.inner_text("#voice option") == "en_US-joe-medium (en-US, medium, 22.05 kHz)"
            page.fill("#text", TEXT)
            page.click("#speak")
            page.wait_for_function("window.ttsPage.done || window.ttsPage.error", timeout=60_000)
            state = page.evaluate("window.ttsPage")
            assert state["error"] is None, state["error"]
            assert state["firstAudioMs"] is not None and state["firstAudioMs"] > 0
            assert state["samplesScheduled"] == expected_samples  # every sample reached Web Audio
            # Wait for playback to pass the last word; every word lit up once, in order.
            page.wait_for_function("window.ttsPage.wordsShown.length >= window.ttsPage.words.length", timeout=30_000)
            state = page.evaluate("window.ttsPage")
            assert [word["text"] for word in state["words"]] == expected_words
            assert state["wordsShown"] == expected_words
            status = page.text_content("#status") or ""
            assert "First audio after" in status
        finally:
            browser.close()
    assert not problems, problems


STREAMED = "Words come one by one. The page plays them. Each lights up in turn."


def _browser_page(playwright: object, problems: list[str]) -> tuple[object, object]:
    browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)  # type: ignore[attr-defined]
    page = browser.new_page()
    page.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: problems.append(str(error)))
    return browser, page


def test_the_page_streams_words_over_the_websocket_and_plays_each_as_it_comes(mesh: Mesh, page_url: str) -> None:
    from playwright.sync_api import sync_playwright

    pieces = [word + " " for word in STREAMED.split()]

    def requests() -> Iterator[tts_pb2.StreamingSynthesizeRequest]:
        yield tts_pb2.StreamingSynthesizeRequest(config=tts_pb2.StreamingSynthesizeConfig(encoding=tts_pb2.FLOAT_PCM))
        for piece in pieces:
            yield tts_pb2.StreamingSynthesizeRequest(text=piece)

    with grpc.insecure_channel(mesh.gateway_address) as channel:
        responses = list(tts_pb2_grpc.TextToSpeechStub(channel).StreamingSynthesize(requests(), timeout=60))
    expected_words = [w.text for r in responses if r.HasField("sentence") for w in r.sentence.words]
    expected_samples = sum(len(r.audio) for r in responses) // 4
    problems: list[str] = []
    with sync_playwright() as playwright:
        browser, page = _browser_page(playwright, problems)
        try:
            page.goto(page_url)  # type: ignore[attr-defined]
            page.wait_for_function("document.querySelectorAll('#voice option').length > 0", timeout=30_000)  # type: ignore[attr-defined]
            page.fill("#text", STREAMED)  # type: ignore[attr-defined]
            page.click("#stream")  # type: ignore[attr-defined]
            # Audio plays before the text is all sent: a listener hears the first sentence while the model still writes.
            page.wait_for_function("window.ttsPage.samplesScheduled > 0 || window.ttsPage.error", timeout=30_000)  # type: ignore[attr-defined]
            early = page.evaluate("window.ttsPage")  # type: ignore[attr-defined]
            assert early["error"] is None, early["error"]
            assert early["wordsSent"] < len(pieces)
            page.wait_for_function("window.ttsPage.done || window.ttsPage.error", timeout=60_000)  # type: ignore[attr-defined]
            page.wait_for_function("window.ttsPage.wordsShown.length >= window.ttsPage.words.length", timeout=30_000)  # type: ignore[attr-defined]
            state = page.evaluate("window.ttsPage")  # type: ignore[attr-defined]
        finally:
            browser.close()  # type: ignore[attr-defined]
    assert state["error"] is None, state["error"]
    assert state["samplesScheduled"] == expected_samples
    assert [word["text"] for word in state["words"]] == expected_words
    assert state["wordsShown"] == expected_words
    assert not problems, problems


def test_stop_cancels_the_stream_and_shows_the_words_heard(mesh: Mesh, page_url: str) -> None:
    from playwright.sync_api import sync_playwright

    text = "A listener may stop the voice at any moment. The page then tells which words were really heard, and nothing more plays."
    problems: list[str] = []
    with sync_playwright() as playwright:
        browser, page = _browser_page(playwright, problems)
        try:
            page.goto(page_url)  # type: ignore[attr-defined]
            page.wait_for_function("document.querySelectorAll('#voice option').length > 0", timeout=30_000)  # type: ignore[attr-defined]
            page.fill("#text", text)  # type: ignore[attr-defined]
            page.click("#stream")  # type: ignore[attr-defined]
            # Stop once the listener has heard the second word through: the playhead follows the audio clock
            # but never runs past the audio that came, as the clock itself does through a stall.
            page.wait_for_function(  # type: ignore[attr-defined]
                "(window.ttsPage.words.length >= 3 && window.ttsPage.playheadS >= window.ttsPage.words[1].endS + 0.1)"
                " || window.ttsPage.error",
                timeout=60_000,
            )
            page.click("#stop")  # type: ignore[attr-defined]
            page.wait_for_function("window.ttsPage.cancelled || window.ttsPage.error", timeout=30_000)  # type: ignore[attr-defined]
            state = page.evaluate("window.ttsPage")  # type: ignore[attr-defined]
            scheduled = state["samplesScheduled"]
            page.wait_for_timeout(1000)  # type: ignore[attr-defined]
            later = page.evaluate("window.ttsPage")  # type: ignore[attr-defined]
            heard_line = page.text_content("#heard") or ""  # type: ignore[attr-defined]
        finally:
            browser.close()  # type: ignore[attr-defined]
    assert state["error"] is None, state["error"]
    # The server counts what was played up to the audio it had sent; the page counts up to the audio that
    # came, so a stall in between cannot count a word whose audio never played.
    assert state["heardPlayedMs"] <= state["playedMs"]
    assert state["playedMs"] >= (state["words"][1]["endS"] + 0.1) * 1000
    heard = [w["text"] for w in state["words"] if w["endS"] * 1000 <= state["heardPlayedMs"]]
    assert state["heardWords"] == heard and len(heard) >= 2
    assert text.startswith(state["heardText"]) and state["heardText"].split()[-1].strip(",.") == heard[-1]
    assert state["heardText"] in heard_line
    assert later["samplesScheduled"] == scheduled  # nothing more reached Web Audio after the stop
    assert not problems, problems
