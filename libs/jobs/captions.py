"""A job's captions, SRT or WebVTT, next to its audio.

A runner keeps each sentence's text, length in samples and word times (relative to the sentence's
first sample) when it commits the sentence (`SentenceWords`); the captions place them on the job's
timeline by adding up the sentences' lengths, so they fit the file whichever runner spoke each
sentence and whatever the file's encoding. A cue spans its sentence's speech, as the captioned
speech route's do.
"""

from __future__ import annotations

import json
from typing import Final

from libs.jobs.audio import JobAudioUnavailableError
from libs.jobs.store import SUCCEEDED, JobRecord, JobStore
from libs.synthesis import captions
from libs.synthesis.captions import Cue
from libs.synthesis.output import AudioChunk, SentenceInfo, WordTime

CAPTION_FORMATS: Final = ("vtt", "srt")
MEDIA_TYPES: Final = {"vtt": "text/vtt", "srt": "application/x-subrip"}
SENTENCES_PER_READ: Final = 256


class SentenceWords:
    """Collects one sentence at a time from an utterance's chunks: what its caption needs."""

    def __init__(self) -> None:
        self._sentence: SentenceInfo | None = None
        self._start_s = 0.0

    def add(self, chunk: AudioChunk) -> None:
        if chunk.sentence is not None:
            self._sentence = chunk.sentence
            self._start_s = chunk.audio_offset_s

    def finish(self, samples: int, sample_rate_hz: int) -> bytes:
        """The sentence's caption data (JSON) once its last chunk is in: its text, its length in
        samples at `sample_rate_hz`, and each word's start and end from its first sample."""
        sentence, self._sentence = self._sentence, None
        data: dict[str, object] = {"text": "", "samples": samples, "rate": sample_rate_hz, "speech": [0.0, 0.0], "words": []}
        if sentence is not None:
            speech_s = sentence.audio_offset_s - self._start_s  # after the silence of SSML breaks before it
            data.update(text=sentence.text, speech=[speech_s, sentence.audio_duration_s],
                        words=[[w.text, w.start_s - self._start_s, w.end_s - self._start_s] for w in sentence.words])  # fmt: skip
        return json.dumps(data, separators=(",", ":")).encode()


async def job_captions(store: JobStore, record: JobRecord, caption_format: str) -> str:
    """The finished job's captions in `caption_format` (vtt or srt)."""
    if record.state != SUCCEEDED:
        raise JobAudioUnavailableError(
            f"job {record.job_id} is {record.state}; its captions exist once it has succeeded (GET the job for its progress)"
        )
    cues: list[Cue] = []
    offset_s = 0.0
    for start in range(0, record.sentences_done, SENTENCES_PER_READ):
        values = await store.words(record.job_id, start, min(SENTENCES_PER_READ, record.sentences_done - start))
        for index, value in enumerate(values):
            if not value:
                raise JobAudioUnavailableError(f"job {record.job_id} kept no words for sentence {start + index}; its captions are gone")
            data = json.loads(value)
            length_s = data["samples"] / data["rate"]
            words = tuple(WordTime(text, offset_s + begin, offset_s + end) for text, begin, end in data["words"])
            speech_s, speech_length_s = data["speech"]
            if data["text"]:
                cues.append(Cue(offset_s + speech_s, offset_s + speech_s + speech_length_s, data["text"], words))
            offset_s += length_s
    return captions.srt(cues) if caption_format == "srt" else captions.webvtt(cues)
