"""The phonemiser pool: real child processes running espeak-ng, real crashes, real hangs (a stopped
process), and every other request served while one child dies."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from dataclasses import replace

import pytest

from libs.text.errors import PhonemizerCrashError, PhonemizerTimeoutError, TextError
from libs.text.frontend import TextFrontend
from libs.text.phonemizer_pool import FrontendSpec, PhonemizerError, PhonemizerPool, _checked_sentences
from libs.voice.registry import default_registry

# One word of 220 stacked "'s" suffixes: espeak-ng 1.52 overflows a stack buffer and aborts. The
# frontend breaks words past `max_word_chars` (64) before espeak-ng sees them; these tests raise
# that bound so the crash really happens, in a child.
CRASHING_TEXT = "s'" * 220


@pytest.fixture(scope="module")
def spec() -> FrontendSpec:
    voice = default_registry().default
    return FrontendSpec(voice.name, voice.phoneme_id_map(), voice.espeak_voice, max_phoneme_ids=400, max_word_chars=64)


@pytest.fixture(scope="module")
def unguarded(spec: FrontendSpec) -> FrontendSpec:
    """The same voice with long words passed to espeak-ng as they are."""
    return replace(spec, voice="unguarded", max_word_chars=5000)


async def _started(processes: int = 2, timeout_s: float = 30.0) -> PhonemizerPool:
    pool = PhonemizerPool(processes, timeout_s)
    await pool.start()
    return pool


async def test_sentences_from_a_child_equal_the_frontend_in_this_process(spec: FrontendSpec) -> None:
    frontend = TextFrontend(spec.phoneme_id_map, spec.espeak_voice, max_phoneme_ids=400)
    text = 'Dr. Smith said "hello." Then he left, quietly; nobody saw him go'
    pool = await _started()
    try:
        assert await pool.sentences(spec, text) == frontend.chunk_sentences(text)
        assert await pool.sentences(spec, text, continues=True) == frontend.chunk_sentences(text, continues=True)
        # A first sentence spoken as its opening and the rest of its plan: the parts cross whole.
        opened = "When the rain stopped, we walked down to the harbour to watch the boats come in before dark."
        parts = await pool.sentences(spec, opened, first_max_ids=96)
        assert parts == frontend.chunk_sentences(opened, first_max_ids=96)
        assert len(parts) == 2 and all(part.spoken_ids is not None for part in parts)
        # A shorter one is opened only for a stream that starts alone: the choice crosses too.
        ordinary = "When the rain stopped, we walked down to the harbour to watch the boats come in."
        assert len(await pool.sentences(spec, ordinary, first_max_ids=96)) == 1
        eager = await pool.sentences(spec, ordinary, first_max_ids=96, eager_opening=True)
        assert eager == frontend.chunk_sentences(ordinary, first_max_ids=96, eager_opening=True) and len(eager) == 2
    finally:
        await pool.close()


async def test_a_crash_fails_only_its_request_and_the_child_is_replaced(spec: FrontendSpec, unguarded: FrontendSpec) -> None:
    pool = await _started()
    try:
        before = pool.pids()
        texts = [f"Sentence number {index} is spoken as usual." for index in range(24)]
        results = await asyncio.gather(
            *(pool.sentences(spec, text) for text in texts[:12]),
            pool.sentences(unguarded, CRASHING_TEXT),
            *(pool.sentences(spec, text) for text in texts[12:]),
            return_exceptions=True,
        )
        crashed = results.pop(12)
        assert isinstance(crashed, PhonemizerCrashError) and isinstance(crashed, TextError)
        assert "crashed" in str(crashed) and "s's" not in str(crashed)  # says what to do, echoes nothing
        assert all(isinstance(result, list) and len(result) == 1 for result in results), results
        assert pool.replaced == 1
        for _ in range(100):  # the replacement starts in the background
            if len(pool.pids()) == 2:
                break
            await asyncio.sleep(0.1)
        after = pool.pids()
        assert len(after) == 2 and len(set(after) - set(before)) == 1
        assert await pool.sentences(spec, "Still speaking.")  # the new child serves too
    finally:
        await pool.close()


async def test_the_same_text_with_long_words_broken_does_not_crash(spec: FrontendSpec) -> None:
    pool = await _started(processes=1)
    try:
        sentences = await pool.sentences(spec, CRASHING_TEXT)
        assert sentences and all(len(sentence.phoneme_ids) <= 400 for sentence in sentences)
        assert pool.replaced == 0
    finally:
        await pool.close()


async def test_a_child_that_hangs_is_killed_replaced_and_the_request_times_out(spec: FrontendSpec) -> None:
    pool = await _started(processes=1, timeout_s=1.0)
    try:
        await pool.on_every_child(spec)  # the voice loaded: the hang is on the text
        (stopped,) = pool.pids()
        os.kill(stopped, signal.SIGSTOP)  # it takes the request and never answers
        with pytest.raises(PhonemizerTimeoutError, match="within 1 s"):
            await pool.sentences(spec, "Nobody will read this.")
        assert await pool.sentences(spec, "A fresh child reads this.")
        assert pool.pids() != [stopped] and pool.replaced == 1
    finally:
        await pool.close()


async def test_a_voice_loads_in_a_child_for_longer_than_a_text_may_take(spec: FrontendSpec) -> None:
    """Mandarin's dictionaries take over a second to load on first use; a text then takes milliseconds.
    The load is bounded by the start timeout, so a slow machine's first Mandarin text is not a hang."""
    mandarin = replace(spec, voice="mandarin", espeak_voice="cmn")
    pool = await _started(processes=1, timeout_s=0.5)
    try:
        sentences = await pool.sentences(mandarin, "我去银行。")
        assert [sentence.pinyin for sentence in sentences] == [("wo3", "qu4", "yin2", "hang2")]
        assert pool.replaced == 0
    finally:
        await pool.close()


async def test_a_child_that_hangs_loading_a_voice_is_replaced_within_the_start_timeout(spec: FrontendSpec) -> None:
    pool = PhonemizerPool(1, 30.0, start_timeout_s=10.0)
    await pool.start()
    try:
        (stopped,) = pool.pids()
        os.kill(stopped, signal.SIGSTOP)
        with pytest.raises(PhonemizerError, match="did not load voice"):
            await pool.sentences(spec, "Nobody will read this.")
        assert await pool.sentences(spec, "A fresh child reads this.")
        assert pool.pids() != [stopped] and pool.replaced == 1
    finally:
        await pool.close()


async def test_a_child_that_died_while_idle_is_replaced_without_failing_anyone(spec: FrontendSpec) -> None:
    pool = await _started(processes=1)
    try:
        (dead,) = pool.pids()
        os.kill(dead, signal.SIGKILL)
        await asyncio.sleep(0.5)  # let the loop see it exit
        assert await pool.sentences(spec, "Served by the replacement.")
        assert pool.pids() != [dead]
    finally:
        await pool.close()


async def test_a_cancelled_request_leaves_its_child_serving(spec: FrontendSpec) -> None:
    pool = await _started(processes=1)
    try:
        task = asyncio.create_task(pool.sentences(spec, "A long enough sentence to still be in flight. " * 20))
        await asyncio.sleep(0)  # sent, not yet answered
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await asyncio.wait_for(pool.sentences(spec, "The next request."), 30)
        assert pool.replaced == 0
    finally:
        await pool.close()


def test_children_import_the_text_frontend_but_not_torch_or_grpc() -> None:
    probe = "import sys, libs.text.phonemizer_child; print(sorted({'torch', 'grpc', 'numpy'} & set(sys.modules)))"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"


def test_answers_that_no_frontend_can_send_are_refused(spec: FrontendSpec) -> None:
    good = [["Hi.", "hˈaɪ.", [1, 0, 20, 0, 2], [["Hi", 1, 4]], "", []]]
    (sentence,) = _checked_sentences(good, spec)
    assert sentence.phoneme_ids == (1, 0, 20, 0, 2) and [(w.text, w.first_id, w.end_id) for w in sentence.words] == [("Hi", 1, 4)]
    assert sentence.spoken_ids is None
    (part,) = _checked_sentences([["Hi.", "hˈaɪ.", [1, 0, 20, 0, 2], [["Hi", 0, 2]], "", [2, 5]]], spec)
    assert part.spoken_ids == (2, 5) and part.spoken_id_count == 3
    for bad in (
        None,
        [["Hi.", "hˈaɪ.", [1, 0, 20, 0, 2], [], ""]],  # no spoken ids
        [["Hi.", "hˈaɪ.", [1, 0, 20, 0, 2], [], "", [3, 3]]],  # spoken ids that are no span
        [["Hi.", "hˈaɪ.", [1, 0, 20, 0, 2], [], "", [0, 6]]],  # past the sentence's ids
        [["Hi.", "hˈaɪ.", [1, 0, 20, 0, 2], [], "", [0]]],
        [["Hi.", "hˈaɪ.", [1, 0, 20, 0, 2], [["Hi", 1, 4]], "", [2, 5]]],  # a word past the spoken ids
        [["Hi.", "hˈaɪ.", [1, 0, 20, 0, 2]]],  # no words
        [["Hi.", "hˈaɪ.", [], []]],
        [["Hi.", "hˈaɪ.", [1, 0, spec.max_id + 1, 2], []]],
        [["Hi.", "hˈaɪ.", [1, -1, 2], []]],
        [["Hi.", "hˈaɪ.", [1, True, 2], []]],
        [["Hi.", "hˈaɪ.", [1] * 401, []]],
        [["Hi.", 7, [1, 2], []]],
        [["Hi.", "hˈaɪ.", [1, 0, 20, 0, 2], [["Hi", 1, 9]]]],  # a word past the sentence's ids
        [["Hi.", "hˈaɪ.", [1, 0, 20, 0, 2], [["Hi", 2, 4], ["there", 1, 3]]]],  # words out of order
        [["Hi.", "hˈaɪ.", [1, 0, 20, 0, 2], [["Hi", "1", 4]]]],
    ):
        with pytest.raises(ValueError):
            _checked_sentences(bad, spec)


async def test_a_child_command_that_never_gets_ready_fails_start() -> None:
    pool = PhonemizerPool(1, 1.0, command=[sys.executable, "-c", "print('not json')"], start_timeout_s=10)
    with pytest.raises(PhonemizerError, match="failed to start"):
        await pool.start()
