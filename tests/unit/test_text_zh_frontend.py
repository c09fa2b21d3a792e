"""The Mandarin front end end to end, and the choice of front end by a voice's espeak-ng voice."""

from __future__ import annotations

import itertools
import re

import pytest

from bench.text_zh import GOLD_PATH, HELDOUT_PATH, POLYPHONES, load_gold, run
from libs.text.errors import UnreadScriptError
from libs.text.frontend import TextFrontend
from libs.text.frontends import frontend_for, is_mandarin
from libs.text.phonemize import phonemize_sentences
from libs.text.reading import ReadingRules
from libs.text.zh.frontend import MandarinFrontend
from libs.text.zh.syllables import syllable_table
from libs.voice.registry import default_registry


@pytest.fixture(scope="module")
def id_map() -> dict[str, list[int]]:
    # Piper's espeak voices, zh_CN ones included, share this phoneme-id map.
    return default_registry().default.phoneme_id_map()


@pytest.fixture(scope="module")
def mandarin(id_map) -> MandarinFrontend:
    return MandarinFrontend(id_map, reading=ReadingRules(written_forms=True), max_phoneme_ids=400)


def test_a_cmn_voice_gets_the_mandarin_front_end_and_every_other_voice_keeps_espeak(id_map) -> None:
    assert isinstance(frontend_for(id_map, "cmn"), MandarinFrontend)
    assert isinstance(frontend_for(id_map, "en-us"), TextFrontend)
    assert is_mandarin("zh") and not is_mandarin("yue")


def test_english_reads_exactly_as_the_espeak_front_end(id_map) -> None:
    text = "Dr. Smith paid $3.50 for 2 coffees. Then he left!"
    chosen = frontend_for(id_map, "en-us", max_phoneme_ids=400).sentences(text)
    assert chosen == TextFrontend(id_map, "en-us", max_phoneme_ids=400).sentences(text)


def test_a_dictionary_word_is_written_as_espeak_ng_writes_it(mandarin) -> None:
    # Where our pinyin and espeak-ng's dictionary agree, the phonemes are espeak-ng's own, stress
    # mark and all: 银行 is one word of its cmn dictionary.
    (sentence,) = mandarin.sentences("银行")
    espeak = "".join(phonemize_sentences("银行", "cmn")[0].phonemes)
    assert "".join(sentence.phonemes) == espeak


def test_the_phonemes_follow_the_pinyin_read_from_context(mandarin) -> None:
    (sentence,) = mandarin.sentences("我去银行，他在行走。")
    assert sentence.pinyin == ("wo3", "qu4", "yin2", "hang2", "ta1", "zai4", "xing2", "zou3")
    assert "χˈɑɜŋ" in "".join(sentence.phonemes)  # hang2
    assert "ɕiɜŋ" in "".join(sentence.phonemes)  # xing2, unstressed before 走


def test_chinese_punctuation_writes_no_phoneme_and_sentences_end_at_full_stops(mandarin) -> None:
    sentences = mandarin.sentences("你好，世界！你呢？")
    assert [s.text for s in sentences] == ["你好，世界！", "你呢？"]
    # ("." is a phoneme here: espeak-ng writes retroflex "s." and apical "i.", the same id as the full stop)
    assert not set("".join(sentences[0].phonemes)) & set(",!?;:")
    assert not "".join(sentences[0].phonemes).endswith(".")
    assert sentences[0].pinyin == ("ni2", "hao3", "shi4", "jie4")


def test_every_id_is_in_the_voice_map_and_the_words_span_their_ids(mandarin, id_map) -> None:
    (sentence,) = mandarin.sentences("今天是2024年5月1日，我用iPhone打电话。")
    known = {i for ids in id_map.values() for i in ids}
    assert set(sentence.phoneme_ids) <= known
    assert sentence.phoneme_ids[:2] == (1, 0) and sentence.phoneme_ids[-1] == 2
    assert [word.text for word in sentence.words][:4] == ["今天", "是", "2024", "年"]
    assert "iPhone" in [word.text for word in sentence.words]
    ends = [(word.first_id, word.end_id) for word in sentence.words]
    assert all(a < b <= c for (a, b), (c, _) in itertools.pairwise(ends))


def test_an_english_word_is_read_by_espeak_ng_as_its_cmn_voice_reads_it(mandarin) -> None:
    (sentence,) = mandarin.sentences("我喜欢Python")
    espeak = [p for p in phonemize_sentences("Python", "cmn")[0].phonemes if p not in ",.!?"]
    assert tuple(espeak) == sentence.phonemes[-len(espeak) :]
    assert sentence.pinyin[-1] == "Python"


def test_a_long_sentence_is_cut_under_the_id_limit_after_a_clause_mark(id_map) -> None:
    frontend = MandarinFrontend(id_map, max_phoneme_ids=160)
    text = "我们明天早上一起去公园散步，然后去图书馆看书，最后去饭店吃晚饭，大家都很高兴。"
    sentences = frontend.sentences(text)
    assert len(sentences) > 1
    assert all(len(s.phoneme_ids) <= 160 for s in sentences)
    assert all(s.text.endswith(("，", "。")) for s in sentences)


def test_only_a_long_first_sentence_starts_with_its_opening(mandarin) -> None:
    # 414 ids: its opening is its first clause; 175 ids, under twice the opening's 96: spoken whole.
    long = "我们在清晨出发，沿着河边的小路一直走到山脚下，然后在那里休息了很久才继续往上爬。"
    opened = mandarin.chunk_sentences(long, first_max_ids=96)
    assert opened[0].text == "我们在清晨出发，" and len(opened[0].phoneme_ids) <= 96
    assert "".join(sentence.text for sentence in opened) == long
    ordinary = "我们在清晨出发，沿着河边的小路走。"
    assert [sentence.text for sentence in mandarin.chunk_sentences(ordinary, first_max_ids=96)] == [ordinary]


def test_a_lexicon_entry_replaces_a_words_phonemes(mandarin) -> None:
    (sentence,) = mandarin.chunk_sentences("我爱北京", lexicon={"北京": ("p", "e", "k", "i", "ŋ")})
    assert "".join(sentence.phonemes).endswith("pekiŋ")


def test_the_gold_set_is_large_enough_and_every_reading_is_a_known_syllable() -> None:
    gold = load_gold(GOLD_PATH)
    table = syllable_table()
    assert len(gold) >= 200
    polyphones = 0
    for sentence in gold:
        han = re.findall(r"[\u4e00-\u9fff]", sentence.text)
        syllables = [token for token in sentence.tokens if re.fullmatch(r"[a-z]+[1-5]", token)]
        assert all(syllable in table for syllable in syllables), sentence.text
        if not sentence.has_digits:
            assert len(han) == len(syllables), sentence.text
            polyphones += sum(ch in POLYPHONES for ch in han)
    assert polyphones >= 100


def test_polyphone_accuracy_is_at_least_95_percent_on_the_gold_and_held_out_sets() -> None:
    for path in (GOLD_PATH, HELDOUT_PATH):
        ours = run(load_gold(path))["ours"]
        assert ours.polyphones_right / ours.polyphones >= 0.95, path.name


def test_words_of_a_script_espeak_ng_spells_are_passed_over_and_a_text_of_nothing_else_is_refused(
    mandarin: MandarinFrontend,
) -> None:
    """espeak-ng's cmn voice reads a Russian word letter by letter, each with the script's name; Korean
    it switches to and reads, and Latin words are English."""
    (sentence,) = mandarin.sentences("这是русский текст和한국어，还有iPhone。")
    written = [word.text for word in sentence.words]
    assert "русский" not in written and "текст" not in written
    assert "한국어" in written and "iPhone" in written
    with pytest.raises(UnreadScriptError, match="Cyrillic script"):
        mandarin.sentences("русский текст")
