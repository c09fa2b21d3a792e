"""ctypes binding to the espeak-ng library shipped by the `espeakng-loader` wheel.

The binding reads text clause by clause, exactly as piper-tts 1.8.0's C bridge does with
`espeak_TextToPhonemesWithTerminator`. The pinned wheel ships espeak-ng 1.52.0, whose public API
has only `espeak_TextToPhonemes` (the "WithTerminator" variant was added after the release).
Both functions run the same `TranslateClause`, which stores the clause terminator that piper reads
in `translator->clause_terminator`. We read that field directly: the address of the `translator`
global comes from the library's ELF symbol table (the wheel is not stripped) and the field's offset
inside the struct is found once at start-up by phonemising five probe clauses whose terminators
are known. Start-up fails loudly if any of that cannot be established, so a changed wheel can never
silently produce different phonemes.

Two more details make the output equal piper's:
- Where the next clause starts in the text: espeak-ng reads one character past a clause and keeps
  it in the static `ungot_char` (also found through the symbol table).
- Piper's espeak-ng (a 2025 snapshot) writes the IPA of two en phonemes differently from 1.52.0;
  `_as_piper_ipa` rewrites them, using a second pass that returns phoneme names.

espeak-ng keeps all of its state in process globals and is not thread-safe; `EspeakEngine` holds a
lock for every call and there is exactly one engine per process (`espeak_engine()`).

espeak-ng 1.52 also aborts the process on some words (libs.text.long_words); `clauses` breaks
such words first, and the gateway runs espeak-ng only in child processes
(libs.text.phonemizer_pool), so whatever else crashes it costs one request, not the gateway.
"""

from __future__ import annotations

import ctypes
import struct
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import espeakng_loader

from libs.text.long_words import DEFAULT_MAX_WORD_CHARS, break_long_words

# Values from espeak-ng's speak_lib.h / translate.h (1.52.0).
_AUDIO_OUTPUT_SYNCHRONOUS: Final = 2
_ESPEAK_CHARS_AUTO: Final = 0
_ESPEAK_PHONEMES_IPA: Final = 0x02
_EE_OK: Final = 0

_CLAUSE_TYPE_SENTENCE: Final = 0x00080000
# Piper's bridge compares the terminator masked with 0x000FFFFF against these exact values.
_PIPER_TERMINATOR_MASK: Final = 0x000FFFFF
CLAUSE_PERIOD: Final = 40 | 0x00000000 | _CLAUSE_TYPE_SENTENCE
CLAUSE_COMMA: Final = 20 | 0x00001000 | 0x00040000
CLAUSE_QUESTION: Final = 40 | 0x00002000 | _CLAUSE_TYPE_SENTENCE
CLAUSE_EXCLAMATION: Final = 45 | 0x00003000 | _CLAUSE_TYPE_SENTENCE
CLAUSE_COLON: Final = 30 | 0x00000000 | 0x00040000
CLAUSE_SEMICOLON: Final = 30 | 0x00001000 | 0x00040000

_TERMINATOR_STRINGS: Final[dict[int, str]] = {
    CLAUSE_PERIOD: ".",
    CLAUSE_QUESTION: "?",
    CLAUSE_EXCLAMATION: "!",
    CLAUSE_COMMA: ",",
    CLAUSE_COLON: ":",
    CLAUSE_SEMICOLON: ";",
}

_CLAUSE_TYPE_CLAUSE: Final = 0x00040000
_CLAUSE_TYPE_VOICE_CHANGE: Final = 0x00020000
_CLAUSE_INTONATION_MASK: Final = 0x00007000
_CLAUSE_INTONATION_NONE: Final = 0x00004000

# Phoneme output with a separator between phonemes (bits 8-23 of the phoneme mode); a private-use
# character never appears in espeak-ng's output, so removing it gives the unseparated string back.
_SEPARATOR: Final = "\ue000"
_SEPARATED: Final = ord(_SEPARATOR) << 8
_LINKING_GLIDE: Final = ";"
_PIPER_LINKING_GLIDE_IPA: Final = "ʲ"
_FLAP: Final = "*"
_PIPER_FLAP_FROM: Final = "r"
_PIPER_FLAP_IPA: Final = "ɾ"

# Probe clauses whose first clause ends with a known terminator; used to find the field offset.
_CALIBRATION_PROBES: Final[tuple[tuple[str, int], ...]] = (
    ("a, b", CLAUSE_COMMA),
    ("a? B", CLAUSE_QUESTION),
    ("a! B", CLAUSE_EXCLAMATION),
    ("a: b", CLAUSE_COLON),
    ("a; b", CLAUSE_SEMICOLON),
)

# A clause consumes at least one byte; this bounds the loop even if the library misbehaves.
_MAX_EMPTY_STEPS: Final = 4

DEFAULT_ESPEAK_VOICE: Final = "en-us"


class EspeakError(RuntimeError):
    """The espeak-ng library could not be loaded, initialised or driven."""


@dataclass(frozen=True)
class EspeakClause:
    """One clause as espeak-ng reads it, with the terminator piper derives from it."""

    phonemes: str
    """IPA phonemes of the clause as piper's espeak-ng writes them (language-switch flags included)."""
    terminator: str
    """Piper's terminator string: one of . ? ! , : ; or "" (no recognised punctuation)."""
    ends_sentence: bool
    """True when espeak-ng's clause type is a sentence end (piper starts a new sentence after it)."""
    text_start: int
    """Index (in characters) in the input text where this clause starts."""
    text_end: int
    """Index (in characters) in the input text where the next clause starts."""


def _elf_symbol_values(library_path: Path, names: set[str]) -> dict[str, int]:
    """Values of `names` in the .symtab of a 64-bit little-endian ELF shared object."""
    data = library_path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise EspeakError(f"{library_path} is not a 64-bit little-endian ELF library")
    (section_table_offset,) = struct.unpack_from("<Q", data, 0x28)
    section_entry_size, section_count = struct.unpack_from("<HH", data, 0x3A)
    sections = [
        struct.unpack_from("<IIQQQQIIQQ", data, section_table_offset + i * section_entry_size)
        for i in range(section_count)
    ]
    found: dict[str, int] = {}
    for _name, section_type, _flags, _addr, offset, size, link, _info, _align, entry_size in sections:
        if section_type != 2:  # SHT_SYMTAB
            continue
        string_table_offset = sections[link][4]
        for index in range(size // entry_size):
            name_offset, _info, _other, _shndx, value, _size = struct.unpack_from(
                "<IBBHQQ", data, offset + index * entry_size
            )
            start = string_table_offset + name_offset
            name = data[start : data.index(b"\0", start)].decode("ascii", "replace")
            if name in names:
                found[name] = value
    missing = names - found.keys()
    if missing:
        raise EspeakError(f"{library_path} has no symbol table entries for {sorted(missing)}")
    return found


@dataclass(frozen=True)
class _RawClause:
    phonemes: str
    terminator_value: int
    end_byte: int


def _raw_terminator(stored_value: int) -> int:
    """The clause terminator espeak-ng's ReadClause returned, from the value TranslateClause stored.

    For a clause of nothing but spaces after a sentence end, TranslateClause adds the sentence bit
    before storing ("carry forward an end-of-sentence indicator"); piper sees the value without it.
    ReadClause never returns the sentence bit together with the clause or voice-change type, or with
    "no intonation", so those combinations identify the carried bit.
    """
    if stored_value & _CLAUSE_TYPE_SENTENCE and (
        stored_value & (_CLAUSE_TYPE_CLAUSE | _CLAUSE_TYPE_VOICE_CHANGE)
        or stored_value & _CLAUSE_INTONATION_MASK == _CLAUSE_INTONATION_NONE
    ):
        return stored_value & ~_CLAUSE_TYPE_SENTENCE
    return stored_value


def _may_differ_from_piper(separated_ipa: str) -> bool:
    """True when a clause holds a phoneme whose IPA piper-tts 1.8.0's espeak-ng writes differently."""
    if _PIPER_FLAP_FROM in separated_ipa:
        return True
    return any("" in word.split(_SEPARATOR) for word in separated_ipa.split(" ") if _SEPARATOR in word)


def _as_piper_ipa(separated_ipa: str, separated_mnemonics: str | None) -> str:
    """A clause's IPA as piper-tts 1.8.0 writes it.

    Piper's espeak-ng (a 2025 snapshot after 1.52.0) evaluates "previous phoneme" conditions in a
    phoneme's IPA definition as false when it writes IPA. In the en tables two phonemes have such
    conditions: the linking glide ";" after an i-vowel before a vowel ("me at", "ratio"), which
    1.52.0 hides and piper writes as "ʲ", and the flap "*" after "@-", which 1.52.0 writes "r" and
    piper "ɾ". The phoneme names (mnemonics) from a second pass tell which IPA token is which.
    """
    if separated_mnemonics is None:
        return separated_ipa.replace(_SEPARATOR, "")
    ipa_words = separated_ipa.split(" ")
    mnemonic_words = separated_mnemonics.split(" ")
    if len(ipa_words) != len(mnemonic_words):
        return separated_ipa.replace(_SEPARATOR, "")
    words: list[str] = []
    for ipa_word, mnemonic_word in zip(ipa_words, mnemonic_words, strict=False):
        ipa_tokens = ipa_word.split(_SEPARATOR)
        mnemonic_tokens = mnemonic_word.split(_SEPARATOR)
        # A superscript phoneme is written without a separator, so counts differ only when the word
        # has one that is already shown; such a word is left as it is.
        if len(ipa_tokens) == len(mnemonic_tokens):
            for index, mnemonic in enumerate(mnemonic_tokens):
                name = mnemonic.lstrip("',=")  # stress marks in mnemonic output
                if name == _LINKING_GLIDE and ipa_tokens[index] == "":
                    ipa_tokens[index] = _PIPER_LINKING_GLIDE_IPA
                elif name == _FLAP and ipa_tokens[index].endswith(_PIPER_FLAP_FROM):
                    ipa_tokens[index] = ipa_tokens[index][: -len(_PIPER_FLAP_FROM)] + _PIPER_FLAP_IPA
        words.append("".join(ipa_tokens))
    return " ".join(words)


class EspeakEngine:
    """The process-wide espeak-ng instance; every method is safe to call from any thread."""

    def __init__(self, library_path: Path, data_path: Path) -> None:
        self._lock = threading.Lock()
        self._library = ctypes.CDLL(str(library_path))
        self._bind_functions()
        symbols = _elf_symbol_values(library_path, {"espeak_Initialize", "translator", "ungot_char"})
        load_bias = ctypes.cast(self._library.espeak_Initialize, ctypes.c_void_p).value
        assert load_bias is not None
        load_bias -= symbols["espeak_Initialize"]
        self._translator_pointer_address = load_bias + symbols["translator"]
        self._ungot_char_address = load_bias + symbols["ungot_char"]

        if self._library.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, str(data_path).encode(), 0) < 0:
            raise EspeakError(f"espeak-ng failed to initialise with data at {data_path}")
        self._set_voice(DEFAULT_ESPEAK_VOICE)
        self._terminator_offset = self._find_terminator_offset()

    def _bind_functions(self) -> None:
        library = self._library
        library.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        library.espeak_Initialize.restype = ctypes.c_int
        library.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        library.espeak_SetVoiceByName.restype = ctypes.c_int
        library.espeak_TextToPhonemes.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_int]
        library.espeak_TextToPhonemes.restype = ctypes.c_char_p

    def _set_voice(self, voice: str) -> None:
        # Selected before every text, as piper does, so espeak-ng starts each text in the same state.
        if self._library.espeak_SetVoiceByName(voice.encode("utf-8")) != _EE_OK:
            raise EspeakError(f"espeak-ng has no voice named {voice!r}")

    def _translator_address(self) -> int:
        address = ctypes.c_void_p.from_address(self._translator_pointer_address).value
        if not address:
            raise EspeakError("espeak-ng has no active translator")
        return address

    def _find_terminator_offset(self) -> int:
        libc = ctypes.CDLL(None)
        libc.malloc_usable_size.argtypes = [ctypes.c_void_p]
        libc.malloc_usable_size.restype = ctypes.c_size_t
        candidates: set[int] | None = None
        for text, expected in _CALIBRATION_PROBES:
            encoded = ctypes.create_string_buffer(text.encode())
            cursor = ctypes.c_void_p(ctypes.addressof(encoded))
            self._library.espeak_TextToPhonemes(ctypes.byref(cursor), _ESPEAK_CHARS_AUTO, _ESPEAK_PHONEMES_IPA)
            address = self._translator_address()
            struct_bytes = ctypes.string_at(address, libc.malloc_usable_size(address))
            matches = {
                offset
                for offset in range(0, len(struct_bytes) - 3, 4)
                if int.from_bytes(struct_bytes[offset : offset + 4], "little", signed=True) == expected
            }
            candidates = matches if candidates is None else candidates & matches
            while cursor.value is not None:  # read the probe to its end so no state is left over
                self._library.espeak_TextToPhonemes(ctypes.byref(cursor), _ESPEAK_CHARS_AUTO, _ESPEAK_PHONEMES_IPA)
        if not candidates or len(candidates) != 1:
            raise EspeakError(f"cannot locate espeak-ng's clause terminator (candidates: {candidates})")
        return candidates.pop()

    def clauses(
        self, text: str, voice: str = DEFAULT_ESPEAK_VOICE, max_word_chars: int = DEFAULT_MAX_WORD_CHARS
    ) -> list[EspeakClause]:
        """Every clause of `text` with its phonemes, piper terminator and position in `text`.

        NUL characters (which end a C string) and lone surrogates (which have no UTF-8 form) are
        replaced by spaces, and so is a character of every word longer than `max_word_chars`
        (`break_long_words`); everything else goes to espeak-ng unchanged. Each replacement keeps
        the length, so the clauses' positions are positions in `text`.
        """
        safe_text = "".join(" " if ch == "\0" or "\ud800" <= ch <= "\udfff" else ch for ch in text)
        safe_text = break_long_words(safe_text, max_word_chars)
        encoded_text = safe_text.encode("utf-8")
        with self._lock:
            self._set_voice(voice)
            ipa_clauses = self._read_clauses(encoded_text, _ESPEAK_PHONEMES_IPA | _SEPARATED)
            mnemonic_clauses: list[_RawClause] | None = None
            if any(_may_differ_from_piper(clause.phonemes) for clause in ipa_clauses):
                self._set_voice(voice)  # the same starting state, so the clauses line up one to one
                mnemonic_clauses = self._read_clauses(encoded_text, _SEPARATED)
                if len(mnemonic_clauses) != len(ipa_clauses):
                    mnemonic_clauses = None

        clauses: list[EspeakClause] = []
        char_start = 0
        byte_start = 0
        for index, clause in enumerate(ipa_clauses):
            end_byte = max(byte_start, clause.end_byte)
            char_end = char_start + len(encoded_text[byte_start:end_byte].decode("utf-8", "replace"))
            mnemonics = mnemonic_clauses[index].phonemes if mnemonic_clauses is not None else None
            masked = _raw_terminator(clause.terminator_value) & _PIPER_TERMINATOR_MASK
            clauses.append(
                EspeakClause(
                    phonemes=_as_piper_ipa(clause.phonemes, mnemonics),
                    terminator=_TERMINATOR_STRINGS.get(masked, ""),
                    ends_sentence=bool(masked & _CLAUSE_TYPE_SENTENCE),
                    text_start=char_start,
                    text_end=char_end,
                )
            )
            byte_start, char_start = end_byte, char_end
        return clauses

    def _read_clauses(self, encoded_text: bytes, phoneme_mode: int) -> list[_RawClause]:
        """Run espeak-ng over the whole text, one call per clause. The caller holds the lock."""
        encoded = ctypes.create_string_buffer(encoded_text)
        base_address = ctypes.addressof(encoded)
        cursor = ctypes.c_void_p(base_address)
        clauses: list[_RawClause] = []
        empty_steps = 0
        while cursor.value is not None:
            before = cursor.value
            phonemes = self._library.espeak_TextToPhonemes(ctypes.byref(cursor), _ESPEAK_CHARS_AUTO, phoneme_mode)
            terminator_address = self._translator_address() + self._terminator_offset
            clauses.append(
                _RawClause(
                    phonemes=(phonemes or b"").decode("utf-8", "replace"),
                    terminator_value=ctypes.c_int.from_address(terminator_address).value,
                    end_byte=self._next_clause_start(encoded_text, cursor.value, base_address),
                )
            )
            empty_steps = empty_steps + 1 if cursor.value == before else 0
            if empty_steps >= _MAX_EMPTY_STEPS:
                break
        return clauses

    def _next_clause_start(self, encoded_text: bytes, cursor: int | None, base_address: int) -> int:
        """Byte offset where the next clause starts.

        espeak-ng reads one character past a clause end to decide where the clause ends and keeps
        it in `ungot_char`; the cursor is then already past that character, which belongs to the
        next clause.
        """
        if cursor is None:
            return len(encoded_text)
        position = cursor - base_address
        held = ctypes.c_int.from_address(self._ungot_char_address).value
        if held > 0:
            try:
                held_bytes = chr(held).encode("utf-8")
            except (ValueError, UnicodeEncodeError):
                return position
            if encoded_text[position - len(held_bytes) : position] == held_bytes:
                return position - len(held_bytes)
        return position


_ENGINE: EspeakEngine | None = None
_ENGINE_LOCK = threading.Lock()


def espeak_engine() -> EspeakEngine:
    """The process-wide espeak-ng engine, initialised on first use."""
    global _ENGINE
    with _ENGINE_LOCK:
        if _ENGINE is None:
            _ENGINE = EspeakEngine(Path(espeakng_loader.get_library_path()), espeak_data_path())
        return _ENGINE


def espeak_data_path() -> Path:
    """The espeak-ng data (dictionaries, phoneme tables) to phonemise with.

    The data piper-tts 1.8.0 ships is newer than the data of the espeak-ng 1.52 wheel, and the
    dictionaries differ (e.g. the weak form of "has been"); Piper voices are spoken with the
    former, so that is the one we read. Only its data files are used, never its code.
    """
    import importlib.util

    spec = importlib.util.find_spec("piper")
    if spec is None or spec.origin is None:
        raise EspeakError("the espeak-ng data of piper-tts is missing: install the pinned piper-tts")
    return Path(spec.origin).parent / "espeak-ng-data"
