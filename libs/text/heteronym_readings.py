"""The readings of the heteronyms the front end chooses between, in espeak-ng's IPA, so a chosen
reading sounds like the rest of the sentence (libs.text.heteronyms decides which)."""

from __future__ import annotations

from typing import Final

NOUN: Final = "noun"
"""Noun or adjective reading of a word whose verb moves the stress (or changes a sound)."""
VERB: Final = "verb"

# word -> (noun/adjective reading, verb reading), in espeak-ng's IPA.
STRESS_PAIRS: Final[dict[str, tuple[str, str]]] = {
    "object": ("ˈɑːbdʒɛkt", "əbdʒˈɛkt"),
    "present": ("pɹˈɛzənt", "pɹɪzˈɛnt"),
    "record": ("ɹˈɛkɚd", "ɹᵻkˈɔːɹd"),
    "records": ("ɹˈɛkɚdz", "ɹᵻkˈɔːɹdz"),
    "permit": ("pˈɜːmɪt", "pɚmˈɪt"),
    "produce": ("pɹˈoʊduːs", "pɹədˈuːs"),
    "project": ("pɹˈɑːdʒɛkt", "pɹədʒˈɛkt"),
    "refuse": ("ɹˈɛfjuːs", "ɹᵻfjˈuːz"),
    "subject": ("sˈʌbdʒɛkt", "səbdʒˈɛkt"),
    "use": ("jˈuːs", "jˈuːz"),
    "excuse": ("ɛkskjˈuːs", "ɛkskjˈuːz"),
    "house": ("hˈaʊs", "hˈaʊz"),
    "contract": ("kˈɑːntɹækt", "kəntɹˈækt"),
    "conduct": ("kˈɑːndʌkt", "kəndˈʌkt"),
    "convict": ("kˈɑːnvɪkt", "kənvˈɪkt"),
    "increase": ("ˈɪŋkɹiːs", "ɪŋkɹˈiːs"),
    "decrease": ("dˈiːkɹiːs", "dᵻkɹˈiːs"),
    "conflict": ("kˈɑːnflɪkt", "kənflˈɪkt"),
    "insult": ("ˈɪnsʌlt", "ɪnsˈʌlt"),
    "rebel": ("ɹˈɛbəl", "ɹᵻbˈɛl"),
    "suspect": ("sˈʌspɛkt", "səspˈɛkt"),
    "progress": ("pɹˈɑːɡɹɛs", "pɹəɡɹˈɛs"),
    "export": ("ˈɛkspɔːɹt", "ɛkspˈɔːɹt"),
    "import": ("ˈɪmpɔːɹt", "ɪmpˈɔːɹt"),
    "torment": ("tˈɔːɹmɛnt", "tɔːɹmˈɛnt"),
    "transport": ("tɹˈænspɔːɹt", "tɹænspˈɔːɹt"),
    "compound": ("kˈɑːmpaʊnd", "kɑːmpˈaʊnd"),
    "defect": ("dˈiːfɛkt", "dᵻfˈɛkt"),
    "extract": ("ˈɛkstɹækt", "ɛkstɹˈækt"),
    "insert": ("ˈɪnsɜːt", "ɪnsˈɜːt"),
    "survey": ("sˈɜːveɪ", "sɚvˈeɪ"),
    "digest": ("dˈaɪdʒɛst", "daɪdʒˈɛst"),
    "upset": ("ˈʌpsɛt", "ʌpsˈɛt"),
    "abuse": ("ɐbjˈuːs", "ɐbjˈuːz"),
    "console": ("kˈɑːnsoʊl", "kənsˈoʊl"),
    "perfect": ("pˈɜːfɛkt", "pɚfˈɛkt"),
    "contest": ("kˈɑːntɛst", "kəntˈɛst"),
    "protest": ("pɹˈoʊtɛst", "pɹətˈɛst"),
    "reject": ("ɹˈiːdʒɛkt", "ɹᵻdʒˈɛkt"),
    "update": ("ˈʌpdeɪt", "ʌpdˈeɪt"),
    "upgrade": ("ˈʌpɡɹeɪd", "ʌpɡɹˈeɪd"),
    "desert": ("dˈɛzɚt", "dᵻzˈɜːt"),
    "close": ("klˈoʊs", "klˈoʊz"),
    "separate": ("sˈɛpɹət", "sˈɛpɚɹˌeɪt"),
    "estimate": ("ˈɛstᵻmət", "ˈɛstᵻmˌeɪt"),
    "graduate": ("ɡɹˈædʒuːət", "ɡɹˈædʒuːˌeɪt"),
    "moderate": ("mˈɑːdɚɹət", "mˈɑːdɚɹˌeɪt"),
    "alternate": ("ˈɔːltɚnət", "ˈɔːltɚnˌeɪt"),
    "appropriate": ("ɐpɹˈoʊpɹɪʲət", "ɐpɹˈoʊpɹɪʲˌeɪt"),
    "associate": ("ɐsˈoʊsɪʲət", "ɐsˈoʊsɪʲˌeɪt"),
    "duplicate": ("dˈuːplɪkət", "dˈuːplɪkˌeɪt"),
    "attribute": ("ˈætɹɪbjˌuːt", "ɐtɹˈɪbjuːt"),
}

# Words with two readings that are not noun against verb: word -> {reading: IPA}.
OTHER_READINGS: Final[dict[str, dict[str, str]]] = {
    "read": {"present": "ɹˈiːd", "past": "ɹˈɛd"},
    "lead": {"guide": "lˈiːd", "metal": "lˈɛd"},
    "live": {"verb": "lˈɪv", "adjective": "lˈaɪv"},
    "lives": {"verb": "lˈɪvz", "noun": "lˈaɪvz"},
    "tear": {"rip": "tˈɛɹ", "cry": "tˈɪɹ"},
    "tears": {"rip": "tˈɛɹz", "cry": "tˈɪɹz"},
    "wind": {"air": "wˈɪnd", "turn": "wˈaɪnd"},
    "wound": {"injury": "wˈuːnd", "turned": "wˈaʊnd"},
    "bass": {"music": "bˈeɪs", "fish": "bˈæs"},
    "bow": {"bend": "bˈaʊ", "ribbon": "bˈoʊ"},
    "bows": {"bend": "bˈaʊz", "ribbon": "bˈoʊz"},
    "dove": {"bird": "dˈʌv", "dived": "dˈoʊv"},
    "minute": {"time": "mˈɪnɪt", "tiny": "maɪnˈuːt"},
    "row": {"line": "ɹˈoʊ", "quarrel": "ɹˈaʊ"},
    "sow": {"plant": "sˈoʊ", "pig": "sˈaʊ"},
    "does": {"verb": "dˈʌz", "deer": "dˈoʊz"},
    "polish": {"shine": "pˈɑːlɪʃ", "nation": "pˈoʊlɪʃ"},
    "resume": {"verb": "ɹᵻzˈuːm", "noun": "ɹˈɛzʊmˌeɪ"},
    "content": {"noun": "kˈɑːntɛnt", "happy": "kəntˈɛnt"},
}


def reading_ipa(word: str, reading: str) -> str:
    """The IPA of one reading of a heteronym."""
    word = word.lower()
    if word in STRESS_PAIRS:
        noun, verb = STRESS_PAIRS[word]
        return noun if reading == NOUN else verb
    return OTHER_READINGS[word][reading]


def readings(word: str) -> dict[str, str]:
    """Every reading of a heteronym: name -> IPA."""
    word = word.lower()
    if word in STRESS_PAIRS:
        noun, verb = STRESS_PAIRS[word]
        return {NOUN: noun, VERB: verb}
    return dict(OTHER_READINGS[word])
