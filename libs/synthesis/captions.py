"""Captions from the sentences and words of an utterance: WebVTT (a cue per sentence, a timestamp tag
before each word, so players can light each word) and SRT (a cue per sentence)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from libs.synthesis.output import WordTime


@dataclass(frozen=True)
class Cue:
    """One sentence on the timeline."""

    start_s: float
    end_s: float
    text: str
    words: tuple[WordTime, ...] = ()


def webvtt(cues: Sequence[Cue]) -> str:
    """WebVTT: one cue per sentence, each word preceded by the timestamp it is spoken at."""
    lines = ["WEBVTT", ""]
    for cue in cues:
        words = " ".join(f"<{_time(word.start_s, '.')}>{_vtt_escape(word.text)}" for word in cue.words)
        lines += [f"{_time(cue.start_s, '.')} --> {_time(cue.end_s, '.')}", words or _vtt_escape(cue.text), ""]
    return "\n".join(lines)


def srt(cues: Sequence[Cue]) -> str:
    """SubRip: numbered cues, one per sentence, with the sentence's text."""
    lines: list[str] = []
    for number, cue in enumerate(cues, start=1):
        lines += [str(number), f"{_time(cue.start_s, ',')} --> {_time(cue.end_s, ',')}", cue.text.replace("\n", " "), ""]
    return "\n".join(lines)


def _time(seconds: float, decimal: str) -> str:
    milliseconds = round(seconds * 1000)
    hours, milliseconds = divmod(milliseconds, 3_600_000)
    minutes, milliseconds = divmod(milliseconds, 60_000)
    return f"{hours:02d}:{minutes:02d}:{milliseconds // 1000:02d}{decimal}{milliseconds % 1000:03d}"


def _vtt_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("-->", "--&gt;")
