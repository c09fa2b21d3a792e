"""Job runners: take jobs from the queue and speak them through the same synthesis API as every
stream (libs.synthesis.synthesizer: cache, zones, retries), one sentence committed at a time
(docs/ARCHITECTURE.md, "Long-form jobs").

A runner holds a job while it renews the job's stream entry (every `claim_idle_s / 3`); one that
dies stops renewing, and after `claim_idle_s` another runner takes the entry over (XAUTOCLAIM),
reads how many sentences are done and goes on from the first one that is not. Synthesis is
deterministic and each sentence is resampled as a stream of its own, so the audio of sentence n
does not depend on which runner made it or when: a resumed job's file is the uninterrupted one.

Jobs yield to live streams by taking few of the gateway's streams (`--job-runners` per process,
each one utterance at a time), by starting only between listeners' starts, and by being unlistened:
the workers run their steps on what the listeners' steps leave.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Final

import grpc
from redis.exceptions import RedisError

from libs.jobs.captions import SentenceWords
from libs.jobs.chunks import ObjectStoreError
from libs.jobs.metrics import JobMetrics
from libs.jobs.requests import job_status_for
from libs.jobs.settings import DEFAULT_CANCEL_POLL_S, JobSettings
from libs.jobs.store import CANCELLED, FAILED, RUNNING, SUCCEEDED, JobStore, QueueEntry
from libs.pb.tts.v1 import tts_pb2
from libs.synthesis.options import SynthesisOptions, resolve_options
from libs.synthesis.synthesizer import Synthesizer
from libs.synthesis.text_side import TextSide
from libs.text.frontend import Sentence
from libs.text.ssml import looks_like_ssml
from libs.voice.registry import VoiceRegistry

_log = logging.getLogger(__name__)

SENTENCES_PER_UTTERANCE: Final = 128
"""A job is spoken as utterances of this many sentences, each one stream of the gateway, whose worker
requests say that nobody listens (`unlistened`): the workers serve live streams first, the first
sentence of an utterance included."""
READ_BLOCK_MS: Final = 1000
"""How long a free runner waits on the queue for a new job before it looks for abandoned ones again."""
PERMANENT_CODES: Final = frozenset(
    (
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.DATA_LOSS,
    )
)
"""Errors that fail a job at once: running it again cannot help (the text cannot be spoken, the voice is
gone, its stored text does not open, a bug)."""
MAX_TRANSIENT_FAILURES: Final = 8
"""Transient failures in a row (no worker, a sick Redis or object store) a runner rides out before it fails the job."""
MAX_BACKOFF_S: Final = 30.0
"""Cap on the wait before a job is tried again after a transient failure (it doubles from 1 s)."""


class _JobGone(Exception):
    """The job was cancelled, deleted or taken over by another runner while this one worked on it."""


@dataclass
class _Progress:
    """What a runner has committed of its job."""

    sentences: int
    chars: int


class JobRunner:
    """`settings.job_runners` concurrent runners in this process, each one job at a time."""

    def __init__(
        self,
        store: JobStore,
        synthesizer: Synthesizer,
        text_side: TextSide,
        registry: VoiceRegistry,
        settings: JobSettings,
        metrics: JobMetrics,
        *,
        cancel_poll_s: float = DEFAULT_CANCEL_POLL_S,
    ) -> None:
        """`text_side` cuts a whole job's text (its length limit is the job limit, not a request's)."""
        self._store = store
        self._synthesizer = synthesizer
        self._text_side = text_side
        self._registry = registry
        self._settings = settings
        self._metrics = metrics
        self._cancel_poll_s = cancel_poll_s
        self._name = f"{socket.gethostname()}-{os.getpid()}"

    async def run(self) -> None:
        """Run until cancelled. A job in hand when cancelled stays claimed and is resumed by another runner."""
        slots = [asyncio.create_task(self._slot(f"{self._name}-{index}")) for index in range(self._settings.job_runners)]
        try:
            await asyncio.gather(*slots)
        finally:
            for slot in slots:
                slot.cancel()
            await asyncio.gather(*slots, return_exceptions=True)

    async def _slot(self, consumer: str) -> None:
        while True:
            try:
                entry = await self._store.claim_abandoned(consumer, self._settings.job_claim_idle_s)
                if entry is None:
                    entry = await self._store.read_new(consumer, READ_BLOCK_MS)
            except RedisError as error:
                _log.warning("job queue unreachable (%s); retrying in 1 s", error)
                await asyncio.sleep(1.0)
                continue
            if entry is None:
                continue
            try:
                await self._work(entry, consumer)
            except RedisError as error:  # the job stays claimed: this runner or another takes it up again
                _log.warning("job %s: Redis failed (%s); leaving it to be taken over", entry.job_id, error)
                await asyncio.sleep(1.0)

    async def _work(self, entry: QueueEntry, consumer: str) -> None:
        if entry.job_id is None:
            await self._store.release(entry.entry_id)
            return
        job_id = entry.job_id
        state = await self._store.take(job_id, consumer)
        if state != RUNNING:  # ended (e.g. cancelled while queued) or gone
            await self._store.release(entry.entry_id)
            return
        if entry.claimed:
            self._metrics.resumed_total.inc()
        _log.info("job %s: taken by %s%s", job_id, consumer, " (resumed)" if entry.claimed else "")
        keeper = asyncio.create_task(self._keep_claim(entry.entry_id, consumer))
        speaking = asyncio.create_task(self._speak_job(job_id, consumer))
        watcher = asyncio.create_task(self._watch(job_id, consumer, speaking))
        try:
            done, _ = await asyncio.wait((speaking, keeper), return_when=asyncio.FIRST_COMPLETED)
            if keeper in done:  # lost the entry to another runner: stop at once
                speaking.cancel()
            outcome = await self._outcome(job_id, consumer, speaking)
        finally:
            for task in (keeper, speaking, watcher):
                task.cancel()
            await asyncio.gather(keeper, speaking, watcher, return_exceptions=True)
        if outcome is not None:
            self._metrics.finished_total.labels(outcome=outcome).inc()
            await self._store.release(entry.entry_id)
            _log.info("job %s: %s", job_id, outcome)

    async def _outcome(self, job_id: str, consumer: str, speaking: asyncio.Task[None]) -> str | None:
        """How the job ended, after recording it; None when this runner no longer holds it."""
        try:
            await speaking
        except (asyncio.CancelledError, _JobGone):
            if asyncio.current_task().cancelling():  # type: ignore[union-attr]
                raise  # this process is stopping: the job stays claimed for another runner
            state, _ = await self._store.state(job_id)
            return state if state in (CANCELLED, "missing") else None
        except Exception as error:
            message = job_status_for(error)[1] if not isinstance(error, RedisError) else f"Redis failed: {error}"
            return FAILED if await self._store.finish(job_id, consumer, FAILED, message) else None
        return SUCCEEDED if await self._store.finish(job_id, consumer, SUCCEEDED) else None

    async def _keep_claim(self, entry_id: str, consumer: str) -> None:
        """Renew the claim until cancelled; returns when another runner has taken the entry."""
        while True:
            await asyncio.sleep(self._settings.job_claim_idle_s / 3)
            try:
                if not await self._store.renew(consumer, entry_id):
                    return
            except RedisError as error:
                _log.warning("could not renew the claim on %s: %s", entry_id, error)

    async def _watch(self, job_id: str, consumer: str, speaking: asyncio.Task[None]) -> None:
        """Stop the job within `cancel_poll_s` of its cancel, delete or takeover."""
        while not speaking.done():
            await asyncio.sleep(self._cancel_poll_s)
            try:
                state, owner = await self._store.state(job_id)
            except RedisError:
                continue
            if state != RUNNING or owner != consumer:
                speaking.cancel()
                return

    async def _speak_job(self, job_id: str, consumer: str) -> None:
        """Speak the job from its first sentence not done; transient failures are retried in place
        (`MAX_TRANSIENT_FAILURES` in a row, counted from the last sentence that was done)."""
        failures = 0
        progress = _Progress(-1, 0)
        done_at_last_failure = -1
        while True:
            try:
                await self._speak_rest(job_id, consumer, progress)
                return
            except Exception as error:
                if isinstance(error, _JobGone):
                    raise
                transient = isinstance(error, (RedisError, ObjectStoreError))
                code = grpc.StatusCode.UNAVAILABLE if transient else job_status_for(error)[0]
                failures = 1 if progress.sentences > done_at_last_failure else failures + 1
                done_at_last_failure = progress.sentences
                if code in PERMANENT_CODES or failures >= MAX_TRANSIENT_FAILURES:
                    raise
                backoff_s = min(MAX_BACKOFF_S, 2.0 ** (failures - 1))
                _log.warning("job %s: %s; resuming in %.0f s", job_id, error, backoff_s)
                await asyncio.sleep(backoff_s)

    async def _speak_rest(self, job_id: str, consumer: str, progress: _Progress) -> None:
        """Speak what is not done yet, keeping `progress` up to date."""
        record = await self._store.get(job_id)
        text = await self._store.text(job_id)
        options = resolve_options(
            self._registry,
            voice=record.spec.voice,
            speed=record.spec.speed,
            encoding=tts_pb2.LINEAR_PCM,  # kept as PCM; each download encodes it (libs.jobs.audio)
            sample_rate_hz=record.spec.sample_rate_hz,
            speaker_id=record.spec.speaker_id,
            request_id=f"job-{job_id}",
            include_alignment=False,
        )
        read = self._text_side.ssml_sentences if looks_like_ssml(text) else self._text_side.sentences
        sentences = await read(options.voice, text)
        progress.sentences, progress.chars = record.sentences_done, record.chars_done
        to_skip = record.sentences_done  # done before: this job resumes after them
        batch: list[Sentence] = []
        async for sentence in sentences:
            if to_skip:
                to_skip -= 1
                continue
            batch.append(sentence)
            if len(batch) == SENTENCES_PER_UTTERANCE:
                await self._speak_batch(job_id, consumer, options, batch, progress, record.text_chars)
                batch = []
        if batch:
            await self._speak_batch(job_id, consumer, options, batch, progress, record.text_chars)

    async def _speak_batch(
        self, job_id: str, consumer: str, options: SynthesisOptions, batch: Sequence[Sentence], progress: _Progress, text_chars: int
    ) -> None:
        pcm = bytearray()
        words = SentenceWords()
        async with aclosing(self._synthesizer.speak(_iterate(batch), options, None, listened=False)) as chunks:
            async for chunk in chunks:
                pcm += chunk.audio
                words.add(chunk)
                if not chunk.sentence_end:
                    continue
                sentence = batch[chunk.sentence_index]
                chars = min(text_chars, progress.chars + len(sentence.text) + 1)
                samples = len(pcm) // 2
                caption = words.finish(samples, options.sample_rate_hz)
                if not await self._store.commit_sentence(
                    job_id, progress.sentences, consumer, bytes(pcm), chars_done=chars, samples=samples, words=caption
                ):
                    raise _JobGone(job_id)
                self._metrics.audio_seconds_total.inc(samples / options.sample_rate_hz)
                progress.sentences += 1
                progress.chars = chars
                pcm = bytearray()


async def _iterate(sentences: Sequence[Sentence]) -> AsyncIterator[Sentence]:
    for sentence in sentences:
        yield sentence
