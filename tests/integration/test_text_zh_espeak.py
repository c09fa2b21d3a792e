"""The Mandarin front end against espeak-ng itself: the syllable table is what espeak-ng's cmn voice
writes, dictionary words come out as espeak-ng writes them, and the text processes serve Mandarin."""

from __future__ import annotations

import pytest

from libs.text.phonemize import phonemize_sentences
from libs.text.phonemizer_pool import FrontendSpec, PhonemizerPool
from libs.text.reading import ReadingRules
from libs.text.zh.frontend import MandarinFrontend
from libs.text.zh.syllables import build_table, pypinyin_syllables, syllable_table
from libs.voice.registry import default_registry


def test_the_committed_syllable_table_is_what_espeak_ng_writes_for_each_syllable() -> None:
    assert build_table(pypinyin_syllables()) == syllable_table()
    assert len(syllable_table()) >= 2000


def test_tones_are_written_as_espeak_ng_cmn_writes_them() -> None:
    table = syllable_table()
    # 55 -> 5, 35 -> ɜ, 214 -> 2, 51 -> 5, 11 -> 1: espeak-ng keeps the first digit of each tone.
    assert [table[f"ma{tone}"] for tone in "12345"] == ["mˈɑ5", "mˈɑɜ", "mˈɑ2", "mˈɑ5", "mˈɑ1"]
    assert "".join(phonemize_sentences("妈麻马骂吗", "cmn")[0].phonemes).split() == ["mˈɑ5", "mˈɑɜ", "mˈɑ2", "mˈɑ5", "mˈɑ1"]


@pytest.mark.parametrize("word", ["银行", "电脑", "你好", "行走"])
def test_a_word_of_espeak_ngs_dictionary_gets_espeak_ngs_own_phonemes(word: str) -> None:
    frontend = MandarinFrontend(default_registry().default.phoneme_id_map())
    espeak = "".join(phonemize_sentences(word, "cmn")[0].phonemes)
    ours = "".join(frontend.sentences(word)[0].phonemes)
    if word == "你好":  # espeak-ng keeps the first's citation tone 3 ("2"); we say the sandhi tone 2 ("ɜ")
        espeak = espeak.replace("2", "ɜ", 1)
    assert ours == espeak


async def test_the_text_processes_read_mandarin_with_its_pinyin() -> None:
    id_map = default_registry().default.phoneme_id_map()
    spec = FrontendSpec("zh_CN-test", id_map, "cmn", max_phoneme_ids=400, max_word_chars=64, read_written_forms=True)
    local = MandarinFrontend(id_map, max_phoneme_ids=400, reading=ReadingRules(written_forms=True))
    pool = PhonemizerPool(1, 30.0)
    await pool.start()
    try:
        chunk = "我明天要去银行取2000元。"
        (sentence,) = await pool.sentences(spec, chunk)
    finally:
        await pool.close()
    assert sentence == local.chunk_sentences(chunk)[0]
    assert sentence.pinyin[:7] == ("wo3", "ming2", "tian1", "yao4", "qu4", "yin2", "hang2")
