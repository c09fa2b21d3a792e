"""The Mandarin reading: polyphones from context, tone sandhi, numbers, sentences (libs.text.zh)."""

from __future__ import annotations

import pytest

from libs.text.zh.numbers import read_numbers
from libs.text.zh.reading import read_run
from libs.text.zh.sandhi import spoken_tones
from libs.text.zh.sentences import split_zh_sentences


def reading(text: str) -> str:
    return " ".join(syllable for word in read_run(text) for syllable in word.syllables)


def spoken(text: str) -> str:
    return " ".join(syllable for word in read_run(text) for syllable in spoken_tones(word.text, word.syllables))


def test_the_seeds_example_reads_bank_as_hang_and_walk_as_xing() -> None:
    assert reading("我去银行") == "wo3 qu4 yin2 hang2"
    assert reading("他在公园里行走") == "ta1 zai4 gong1 yuan2 li3 xing2 zou3"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("他跑得很快", "ta1 pao3 de5 hen3 kuai4"),  # complement marker after a verb
        ("我们得走了", "wo3 men5 dei3 zou3 le5"),  # "must" after a person
        ("他得了第一名", "ta1 de2 le5 di4 yi1 ming2"),  # "got"
        ("这条河很长", "zhe4 tiao2 he2 hen3 chang2"),  # "long" after a degree adverb
        ("孩子长得真快", "hai2 zi5 zhang3 de5 zhen1 kuai4"),  # "grow" before 得
        ("借了钱就要按时还", "jie4 le5 qian2 jiu4 yao4 an4 shi2 huan2"),  # "give back" at a clause end
        ("那只小猫很可爱", "na4 zhi1 xiao3 mao1 hen3 ke3 ai4"),  # a measure word after a demonstrative
        ("他慢慢地走", "ta1 man4 man4 de5 zou3"),  # adverbial marker
        ("他睡着了", "ta1 shui4 zhao2 le5"),  # a reached result
        ("我睡了一个好觉", "wo3 shui4 le5 yi1 ge4 hao3 jiao4"),  # "sleep"
        ("他姓曾", "ta1 xing4 zeng1"),  # a surname's reading after 姓
        ("我们想想", "wo3 men5 xiang3 xiang5"),  # a reduplicated verb's light copy
    ],
)
def test_polyphones_are_read_from_their_context(text: str, expected: str) -> None:
    assert reading(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("不是", "bu2 shi4"),  # 不 before a fourth tone
        ("不好", "bu4 hao3"),
        ("一个", "yi2 ge4"),  # 一 before a fourth tone
        ("一天", "yi4 tian1"),  # 一 before the other tones
        ("第一", "di4 yi1"),  # a number keeps yi1
        ("十一", "shi2 yi1"),
        ("你好", "ni2 hao3"),  # two third tones
        ("展览馆", "zhan2 lan2 guan3"),  # a chain of three, 2 + 1
    ],
)
def test_tone_sandhi_gives_the_tones_as_said(text: str, expected: str) -> None:
    assert spoken(text) == expected


def test_a_reduplicated_third_tone_verb_rises_before_its_light_copy() -> None:
    assert spoken_tones("想想", ["xiang3", "xiang5"]) == ["xiang2", "xiang5"]


def test_citation_readings_keep_yi_and_bu_in_their_dictionary_tones() -> None:
    assert reading("一定不要") == "yi1 ding4 bu4 yao4"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024年5月1日", "二零二四年五月一日"),
        ("35元", "三十五元"),
        ("我有2个苹果", "我有两个苹果"),
        ("增长了15%", "增长了百分之十五"),
        ("下午3:30", "下午三点三十分"),
        ("10:05", "十点零五分"),
        ("-5℃", "零下五摄氏度"),
        ("12.5秒", "十二点五秒"),
        ("1/2", "二分之一"),
        ("3kg", "三千克"),
        ("1,200,000元", "一百二十万元"),
        ("第1名", "第一名"),
        ("$5.99", "五点九九美元"),
        ("13812345678", "幺三八幺二三四五六七八"),
        ("2000人", "两千人"),
        ("3-5天", "三到五天"),
        ("二〇二四年", "二零二四年"),
        ("第2名", "第二名"),
        ("第2个", "第二个"),
        ("￥199元", "一百九十九元"),
        ("$5美元", "五美元"),
        ("138-0013-8000", "幺三八零零幺三八零零零"),
        ("138 0013 8000", "幺三八零零幺三八零零零"),
        ("+86 139 1234 5678", "加八六幺三九幺二三四五六七八"),
        ("010-12345678", "零幺零幺二三四五六七八"),
        ("(0755) 8888 6666", "零七五五八八八八六六六六"),
        ("978-7-111-5", "九七八七幺幺幺五"),
        ("请拨打110，呼叫 120", "请拨打幺幺零，呼叫幺二零"),
        ("有110个", "有一百一十个"),
        ("2024-12-05出发", "二零二四年十二月五日出发"),
        ("2024/1/31", "二零二四年一月三十一日"),
        ("12-25", "十二到二十五"),
    ],
)
def test_numbers_dates_money_and_units_are_read_in_chinese(text: str, expected: str) -> None:
    assert read_numbers(text) == expected


def test_numbers_too_long_to_read_as_numbers_are_read_digit_by_digit() -> None:
    assert read_numbers("增长" + "3" * 20 + "%") == "增长百分之" + "三" * 20
    assert read_numbers("¥" + "9" * 17) == "九" * 17 + "元"
    assert read_numbers("1/" + "2" * 5000).startswith("二二二")


def test_sentences_end_after_chinese_marks_and_the_chunks_give_the_text_back() -> None:
    text = "你好！今天天气很好。你去吗？“好的。”他说。价格是3.5元. End"
    chunks = split_zh_sentences(text, 1000)
    assert "".join(chunks) == text
    assert chunks[:4] == ["你好！", "今天天气很好。", "你去吗？", "“好的。”"]
    assert "价格是3.5元. " in chunks  # a decimal point is not a sentence end


def test_a_sentence_over_the_chunk_limit_is_cut_after_a_clause_mark() -> None:
    text = "一二三四五，六七八九十，一二三四五六七八九十。"
    chunks = split_zh_sentences(text, 14)
    assert "".join(chunks) == text
    assert chunks[0] == "一二三四五，六七八九十，"
    assert all(len(chunk) <= 14 for chunk in chunks)
