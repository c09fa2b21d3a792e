"""The SSML subset parsed into segments (libs.text.ssml): what each element becomes, and errors that
name what is not supported."""

from __future__ import annotations

import pytest

from libs.text.ssml import MAX_BREAK_MS, MIN_PAUSE_BUDGET_MS, SsmlError, looks_like_ssml, parse_ssml, pause_budget_ms


def test_breaks_and_marks_follow_their_text_in_order() -> None:
    segments = parse_ssml(
        '<speak><mark name="start"/>One <break time="1.5s"/>two <mark name="here"/>three '
        '<break strength="weak"/><mark name="end"/></speak>'
    )
    assert [(s.text.strip(), s.pause_and_marks()) for s in segments] == [
        ("", (0, [("start", 0)])),
        ("One", (1500, [])),
        ("two", (0, [("here", 0)])),
        ("three", (200, [("end", 200)])),
    ]


def test_breaks_add_up_to_the_longest_pause() -> None:
    (segment,) = parse_ssml('<speak>Wait<break time="6s"/><break time="6s"/></speak>')
    assert segment.pause_and_marks() == (MAX_BREAK_MS, [])


def test_a_documents_breaks_may_add_up_to_what_its_characters_would_take_to_read() -> None:
    # 249 breaks of 10 s between single letters: 41 minutes of silence from 4,995 characters
    flood = "<speak>" + 'a<break time="10s"/>' * 249 + "</speak>"
    with pytest.raises(SsmlError, match=r"breaks add up to 2490 s; a document of 4995 characters may pause 300 s"):
        parse_ssml(flood)
    assert pause_budget_ms(len(flood)) == MIN_PAUSE_BUDGET_MS
    # a guided breath with its pauses, well within: thirty pauses of 10 s
    assert len(parse_ssml("<speak>" + 'Breathe in.<break time="10s"/>' * 30 + "</speak>")) == 30
    # a long-form job's document may pause in proportion to its length
    long_document = "<speak>" + ("A sentence of some length goes here, then a pause." + '<break time="1s"/>') * 2_000 + "</speak>"
    assert len(long_document) * 60 > MIN_PAUSE_BUDGET_MS and len(parse_ssml(long_document)) == 2_000


def test_phoneme_sub_and_say_as_become_text_the_front_end_reads() -> None:
    (segment,) = parse_ssml(
        '<speak xmlns="http://www.w3.org/2001/10/synthesis">Say <phoneme alphabet="ipa" ph="təmˈɑːtoʊ">tomato</phoneme>, '
        '<sub alias="World Wide Web">WWW</sub>, <say-as interpret-as="characters">tts</say-as>, '
        '<say-as interpret-as="ordinal">3</say-as>, <say-as interpret-as="cardinal">1,200</say-as>, '
        '<say-as interpret-as="digits">42</say-as>, <say-as interpret-as="telephone">555-0123</say-as>, '
        '<say-as interpret-as="date">12/25/2026</say-as> at <say-as interpret-as="time">9:05</say-as>.</speak>'
    )
    words = " ".join(segment.text.split())
    assert words == (
        "Say [[ təmˈɑːtoʊ ]], World Wide Web, T T S, third, one thousand two hundred, four two, "
        "five five five, zero one two three, December twenty-fifth, twenty twenty-six at nine oh five."
    )


def test_say_as_reads_only_decimal_digits_as_digits() -> None:
    (segment,) = parse_ssml('<speak><say-as interpret-as="characters">a\u00b2b</say-as> <say-as interpret-as="digits">\u00b23</say-as></speak>')
    assert "three" in segment.text


def test_prosody_rate_gives_its_text_a_segment_at_that_rate() -> None:
    segments = parse_ssml('<speak>Normal <prosody rate="slow">slow <prosody rate="200%">fast</prosody></prosody> normal</speak>')
    assert [(s.text.strip(), s.rate) for s in segments] == [("Normal", 1.0), ("slow", 0.75), ("fast", 1.5), ("normal", 1.0)]


def test_paragraphs_and_sentences_end_with_a_sentence_end() -> None:
    (segment,) = parse_ssml("<speak><p>First para</p><p><s>One</s><s>Two?</s></p></speak>")
    assert segment.text == "First para.\n\nOne. Two?\n\n"


@pytest.mark.parametrize(
    ("document", "named"),
    [
        ('<speak><audio src="x.wav"/></speak>', "fetches nothing"),
        ('<speak><audio src="x.wav"><desc>a bell</desc></audio></speak>', "fetches nothing"),
        ('<speak><emphasis level="loud">x</emphasis></speak>', "'loud'"),
        ("<speak><lang>x</lang></speak>", "xml:lang"),
        ('<speak><prosody pitch="high">x</prosody></speak>', "'pitch'"),
        ("<voice>x</voice>", "<voice>"),
        ('<speak><say-as interpret-as="currency">$5</say-as></speak>', "'currency'"),
        ('<speak><phoneme alphabet="x-sampa" ph="h@l">hello</phoneme></speak>', "x-sampa"),
        ('<speak><break time="forever"/></speak>', "forever"),
        (f'<speak><break time="{MAX_BREAK_MS + 1}ms"/></speak>', "longer than"),
        ('<speak><prosody rate="9000%">x</prosody></speak>', "out of range"),
        ('<speak><prosody rate="x-slow"><prosody rate="x-slow"><prosody rate="x-slow">x</prosody></prosody></prosody></speak>', "nested rates multiply"),
        ('<speak><phoneme ph="' + "h ə l ˈoʊ " * 50 + '">x</phoneme></speak>', "one word"),
        ("<speak>" + "<s>" * 5_000 + "x" + "</s>" * 5_000 + "</speak>", "nest 32 deep at most"),
        ("<speak>unclosed", "well-formed"),
        ('<!DOCTYPE speak [<!ENTITY a "aaaa">]><speak>&a;</speak>', "DOCTYPE"),
    ],
)
def test_anything_outside_the_subset_is_an_error_naming_it(document: str, named: str) -> None:
    with pytest.raises(SsmlError) as raised:
        parse_ssml(document)
    assert named in str(raised.value)


def test_a_speak_root_turns_ssml_on() -> None:
    assert looks_like_ssml("  <speak>Hi</speak>")
    assert not looks_like_ssml("I <3 speaking")


@pytest.mark.parametrize(
    ("text", "ssml"),
    [
        ("<speak>Hi.</speak>", True),
        ('  <?xml version="1.0" encoding="UTF-8"?>\n<speak version="1.1">Hi.</speak>', True),
        ("<!-- made by a tool --><speak>Hi.</speak>", True),
        ('<?xml version="1.0"?><!DOCTYPE speak PUBLIC "-//W3C//DTD SYNTHESIS 1.0//EN" "synthesis.dtd"><speak>Hi.</speak>', True),
        ("<speaker>Hi.</speaker>", False),
        ("Say <speak>Hi.</speak>", False),
        ("a < b", False),
    ],
)
def test_a_document_is_ssml_when_its_root_is_speak_after_any_xml_prologue(text: str, ssml: bool) -> None:
    assert looks_like_ssml(text) is ssml


def test_a_document_with_a_declaration_is_read_as_ssml() -> None:
    (segment,) = parse_ssml('<?xml version="1.0" encoding="UTF-8"?>\n<!-- a comment --><speak>Hello there.</speak>')
    assert segment.text.strip() == "Hello there."
    with pytest.raises(SsmlError, match="DOCTYPE"):
        parse_ssml('<?xml version="1.0"?><!DOCTYPE speak [<!ENTITY x "y">]><speak>&x;</speak>')


def test_emphasis_lang_and_audio_are_read_as_their_content() -> None:
    """SSML written for other engines speaks: what the voice cannot render is read as the text inside
    it, and an <audio> clip (never fetched) as its spoken alternative, without its <desc>."""
    (segment,) = parse_ssml(
        '<speak>It is <emphasis level="strong">very</emphasis> big. <audio src="https://x/bell.mp3"><desc>a bell</desc>'
        'Ding dong.</audio> <lang xml:lang="fr-FR">Bonjour</lang>, friend.</speak>'
    )
    assert segment.text == "It is very big. Ding dong. Bonjour, friend."
