"""Long-form jobs in Redis: the queue is a Redis Stream read by a consumer group, each job is a hash,
its text a string and its audio one PCM value per sentence (docs/ARCHITECTURE.md, "Long-form jobs").

Keys (all under `tts:job`; every job key expires `ttl_s` after the job's last change):

- `tts:jobs:queue`: the stream; one entry (`job=<id>`) per job, read by the group `runners`. An
  entry stays pending while a runner works on it, is acknowledged and deleted when the job ends,
  and is taken over (XAUTOCLAIM) by another runner when its runner stops renewing its claim.
- `tts:jobs:index`: sorted set of job ids by creation time (for listing).
- `tts:job:<id>`: the job's record (hash; see `JobRecord`).
- `tts:job:<id>:text`: the text as sent (sealed with the cache's key ring when it has one; libs.jobs.sealed).
- `tts:job:<id>:pcm:<n>`: sentence n's audio, 16-bit little-endian PCM at the job's rate (sealed likewise),
  or with `--job-audio-store s3://...` the name of the object that holds it (libs.jobs.chunks).
- `tts:job:<id>:words:<n>`: sentence n's text, length and word times, for captions (JSON, sealed likewise;
  libs.jobs.captions).
- `tts:jobs:idem:<key>`: an idempotency key -> `<id> <request fingerprint>` (keyed when sealed: libs.jobs.sealed).

Every change that must not race is one Lua script (libs.jobs.scripts): creating a job (idempotency key, record, text,
index and stream entry at once), taking it, committing a sentence and finishing it. A runner owns a
job by writing its consumer name to `owner`; commits and the finish check the owner, so a runner
that lost its job (it stalled past the claim timeout and another took over) can write nothing.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from libs.cache.mel_cache import redis_client
from libs.cache.sealing import KeyRing
from libs.cache.settings import CacheSettings
from libs.jobs.chunks import AudioChunks, InRedis
from libs.jobs.scripts import CANCEL, COMMIT, CREATE, FINISH, RENEW, TAKE
from libs.jobs.sealed import JobSeal

QUEUE_KEY: Final = "tts:jobs:queue"
GROUP: Final = "runners"
INDEX_KEY: Final = "tts:jobs:index"
_JOB_PREFIX: Final = "tts:job:"
_IDEMPOTENCY_PREFIX: Final = "tts:jobs:idem:"
JOB_REDIS_TIMEOUT_S: Final = 10.0
"""Socket timeouts of the job Redis: longer than the cache's, as a job call is not on a listener's
first-audio path and a one-megabyte text takes a moment to write."""

QUEUED: Final = "queued"
RUNNING: Final = "running"
SUCCEEDED: Final = "succeeded"
FAILED: Final = "failed"
CANCELLED: Final = "cancelled"
STATES: Final = (QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED)
TERMINAL_STATES: Final = frozenset((SUCCEEDED, FAILED, CANCELLED))


class JobNotFoundError(LookupError):
    """No job has this id (never created, deleted, or expired)."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"job {job_id!r} does not exist (it may have expired or been deleted)")


class IdempotencyConflictError(ValueError):
    """An idempotency key was used before for a different request."""

    def __init__(self, key: str, job_id: str) -> None:
        super().__init__(
            f"idempotency key {key!r} was used for another request (job {job_id}); use a new key for a new request"
        )
        self.job_id = job_id


def job_key(job_id: str) -> str:
    return f"{_JOB_PREFIX}{job_id}"


def text_key(job_id: str) -> str:
    return f"{_JOB_PREFIX}{job_id}:text"


def pcm_key(job_id: str, sentence: int) -> str:
    return f"{_JOB_PREFIX}{job_id}:pcm:{sentence}"


def words_key(job_id: str, sentence: int) -> str:
    return f"{_JOB_PREFIX}{job_id}:words:{sentence}"


@dataclass(frozen=True)
class JobSpec:
    """What a job is asked to speak, and how (validated by the door before it is stored)."""

    voice: str
    speed: float
    encoding: int
    """AudioEncoding the audio is served in by default."""
    sample_rate_hz: int
    """Rate of the stored audio (the encoding's rate as resolved at creation)."""
    speaker_id: int

    def request_bytes(self, text: str) -> bytes:
        """The request as bytes, for its fingerprint (libs.jobs.sealed.JobSeal.fingerprint)."""
        options = f"{self.voice}\0{self.speed!r}\0{self.encoding}\0{self.sample_rate_hz}\0{self.speaker_id}\0"
        return options.encode() + text.encode("utf-8", "surrogatepass")


@dataclass(frozen=True)
class JobRecord:
    """A job as stored."""

    job_id: str
    state: str
    spec: JobSpec
    text_chars: int
    """Characters of the text."""
    created_s: float
    """Unix time of creation."""
    updated_s: float
    """Unix time of the last change."""
    sentences_done: int
    """Sentences done in all: the audio values 0 .. sentences_done - 1 exist."""
    chars_done: int
    """Characters of the text spoken so far (at sentence granularity)."""
    audio_samples: int
    """Samples of audio done, at `spec.sample_rate_hz`."""
    error: str
    owner: str
    """Consumer name of the runner that holds it ("" when none)."""
    attempts: int
    """How many times a runner has taken it."""

    @property
    def audio_s(self) -> float:
        return self.audio_samples / self.spec.sample_rate_hz if self.spec.sample_rate_hz else 0.0

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL_STATES


def _record(job_id: str, fields: dict[bytes, bytes]) -> JobRecord:
    def text(name: str) -> str:
        return fields.get(name.encode(), b"").decode()

    def number(name: str) -> int:
        return int(fields.get(name.encode(), b"0") or 0)

    return JobRecord(
        job_id=job_id,
        state=text("state"),
        spec=JobSpec(text("voice"), float(text("speed") or 1.0), number("encoding"), number("sample_rate_hz"), number("speaker_id")),
        text_chars=number("text_chars"),
        created_s=float(text("created_s") or 0),
        updated_s=float(text("updated_s") or 0),
        sentences_done=number("sentences_done"),
        chars_done=number("chars_done"),
        audio_samples=number("audio_samples"),
        error=text("error"),
        owner=text("owner"),
        attempts=number("attempts"),
    )


@dataclass(frozen=True)
class QueueStats:
    """The queue as the metrics and the autoscaler see it."""

    waiting: int
    """Jobs no runner has taken yet."""
    in_progress: int
    """Jobs a runner holds (pending entries)."""
    lag_s: float
    """Age of the oldest job no runner has taken yet (0 when none waits)."""


@dataclass(frozen=True)
class QueueEntry:
    """One stream entry a runner was handed."""

    entry_id: str
    job_id: str | None
    """None: the entry was deleted while pending (nothing to do but acknowledge it)."""
    claimed: bool
    """Taken over from another runner (XAUTOCLAIM), not read new."""


class JobStore:
    """Every Redis operation on jobs, and where their audio goes."""

    def __init__(
        self, client: aioredis.Redis, ttl_s: int, chunks: AudioChunks | None = None, keyring: KeyRing | None = None
    ) -> None:
        """`chunks` holds the audio (default: Redis itself); with `keyring` text and audio are sealed at rest."""
        self._client = client
        self.ttl_s = ttl_s
        self._chunks = chunks or InRedis()
        self._seal = JobSeal(keyring)
        self._create = client.register_script(CREATE)
        self._take = client.register_script(TAKE)
        self._commit = client.register_script(COMMIT)
        self._finish = client.register_script(FINISH)
        self._cancel = client.register_script(CANCEL)
        self._renew = client.register_script(RENEW)

    @classmethod
    def from_url(
        cls, url: str, ttl_s: int, connection: CacheSettings = CacheSettings(), *,
        chunks: AudioChunks | None = None, keyring: KeyRing | None = None,
    ) -> JobStore:  # fmt: skip
        """A store on the Redis at `url`, dialled as the cache's Redis is (`connection`'s password
        file and CA, an ACL user in the URL), always as one Redis: the scripts touch the queue, the
        index and a job's keys at once, which no cluster allows."""
        return cls(redis_client(url, connection, JOB_REDIS_TIMEOUT_S, cluster=False), ttl_s, chunks, keyring)  # type: ignore[arg-type]

    async def close(self) -> None:
        await self._client.aclose()
        await self._chunks.close()

    async def ensure_group(self) -> None:
        """Create the stream and its consumer group if they do not exist yet."""
        try:
            await self._client.xgroup_create(QUEUE_KEY, GROUP, id="0", mkstream=True)
        except ResponseError as error:
            if "BUSYGROUP" not in str(error):
                raise

    # ---- the API side

    async def create(self, text: str, spec: JobSpec, idempotency_key: str = "") -> tuple[JobRecord, bool]:
        """Queue a new job; with an idempotency key already used for the same request, the job it made.
        Returns the job and whether it is new. IdempotencyConflictError for a key used for another request."""
        await self.ensure_group()
        job_id = uuid.uuid4().hex
        request = spec.request_bytes(text)
        fingerprint = self._seal.fingerprint(request)
        now = time.time()
        fields: dict[str, Any] = {
            "state": QUEUED, "voice": spec.voice, "speed": repr(spec.speed), "encoding": spec.encoding,
            "sample_rate_hz": spec.sample_rate_hz, "speaker_id": spec.speaker_id, "text_chars": len(text),
            "created_s": repr(now), "updated_s": repr(now), "sentences_done": 0,
            "chars_done": 0, "audio_samples": 0, "error": "", "owner": "", "attempts": 0,
        }  # fmt: skip
        pairs = [item for name, value in fields.items() for item in (name, value)]
        idem = f"{_IDEMPOTENCY_PREFIX}{idempotency_key}" if idempotency_key else ""
        await self._client.zremrangebyscore(INDEX_KEY, "-inf", now - self.ttl_s)  # ids whose jobs have expired
        stored_text = self._seal.seal(text_key(job_id), text.encode("utf-8", "surrogatepass"))
        made, held = await self._create(
            keys=[idem, job_key(job_id), text_key(job_id), INDEX_KEY, QUEUE_KEY],
            args=[job_id, fingerprint, self.ttl_s, repr(now), stored_text, *pairs],
        )
        held_id, _, held_fingerprint = held.decode().partition(" ")
        if not made:
            if not self._seal.same_request(held_fingerprint, request):
                raise IdempotencyConflictError(idempotency_key, held_id)
            return await self.get(held_id), False
        # The job as made, queued: a runner may claim it before a second read, and the answer to a
        # create says what was created.
        return _record(job_id, {name.encode(): str(value).encode() for name, value in fields.items()}), True

    async def get(self, job_id: str) -> JobRecord:
        fields = await self._client.hgetall(job_key(job_id)) if job_id else {}
        if not fields:
            raise JobNotFoundError(job_id)
        return _record(job_id, fields)

    async def list(self, limit: int, offset: int = 0) -> list[JobRecord]:
        """Jobs, newest first."""
        ids = [raw.decode() for raw in await self._client.zrevrange(INDEX_KEY, offset, offset + limit - 1)]
        records: list[JobRecord] = []
        for job_id in ids:
            try:
                records.append(await self.get(job_id))
            except JobNotFoundError:
                await self._client.zrem(INDEX_KEY, job_id)
        return records

    async def cancel(self, job_id: str) -> JobRecord:
        """Cancel a job that has not ended (its runner stops within `cancel_poll_s`); an ended job is left as it is."""
        state = (await self._cancel(keys=[job_key(job_id), QUEUE_KEY], args=[repr(time.time()), self.ttl_s])).decode()
        if state == "missing":
            raise JobNotFoundError(job_id)
        return await self.get(job_id)

    async def delete(self, job_id: str) -> None:
        """Cancel the job and remove everything it stored. Its audio goes first, so a delete that fails
        on the object store leaves the job in place to be deleted again."""
        record = await self.cancel(job_id)
        await self._chunks.remove(job_id)
        sentences = range(record.sentences_done + 1)
        keys = [job_key(job_id), text_key(job_id), *(pcm_key(job_id, n) for n in sentences), *(words_key(job_id, n) for n in sentences)]
        for start in range(0, len(keys), 1000):
            await self._client.unlink(*keys[start : start + 1000])
        await self._client.zrem(INDEX_KEY, job_id)

    async def audio(self, job_id: str, start: int, count: int) -> list[bytes]:
        """The PCM of sentences start .. start + count - 1 (missing ones, expired, as empty);
        TamperedJobDataError for one that does not open."""
        stored = await self._client.mget([pcm_key(job_id, n) for n in range(start, start + count)])
        values = await self._chunks.fetch(job_id, stored)
        return [self._opened_audio(job_id, start + offset, value) if value else b"" for offset, value in enumerate(values)]

    async def words(self, job_id: str, start: int, count: int) -> list[bytes]:
        """The caption data (JSON) of sentences start .. start + count - 1 (missing ones as empty)."""
        keys = [words_key(job_id, n) for n in range(start, start + count)]
        stored = await self._client.mget(keys)
        return [
            self._seal.open(key, value, f"job {job_id}'s words of sentence {start + offset}") if value else b""
            for offset, (key, value) in enumerate(zip(keys, stored, strict=True))
        ]

    def _opened_audio(self, job_id: str, sentence: int, value: bytes) -> bytes:
        return self._seal.open(pcm_key(job_id, sentence), value, f"job {job_id}'s audio of sentence {sentence}")

    async def queue_stats(self) -> QueueStats:
        await self.ensure_group()
        length = await self._client.xlen(QUEUE_KEY)
        pending = (await self._client.xpending(QUEUE_KEY, GROUP))["pending"]
        lag_s = 0.0
        groups = await self._client.xinfo_groups(QUEUE_KEY)
        last = next((group["last-delivered-id"] for group in groups if group["name"] in (GROUP, GROUP.encode())), b"0-0")
        last = last.decode() if isinstance(last, bytes) else last
        oldest = await self._client.xrange(QUEUE_KEY, min=f"({last}", count=1)
        if oldest:
            created_ms = int(oldest[0][0].decode().split("-")[0])
            lag_s = max(0.0, time.time() - created_ms / 1000)
        return QueueStats(waiting=max(0, length - pending), in_progress=pending, lag_s=lag_s)

    # ---- the runner side

    async def read_new(self, consumer: str, block_ms: int) -> QueueEntry | None:
        """The next job no runner has taken, waiting up to `block_ms` for one."""
        answer = await self._client.xreadgroup(GROUP, consumer, {QUEUE_KEY: ">"}, count=1, block=block_ms)
        for _stream, entries in answer or []:
            for entry_id, fields in entries:
                return QueueEntry(entry_id.decode(), fields[b"job"].decode(), claimed=False)
        return None

    async def claim_abandoned(self, consumer: str, min_idle_s: float) -> QueueEntry | None:
        """A job whose runner has not renewed its claim for `min_idle_s`, now this consumer's."""
        answer = await self._client.xautoclaim(QUEUE_KEY, GROUP, consumer, int(min_idle_s * 1000), start_id="0-0", count=1)
        entries = answer[1]
        if not entries:
            return None
        entry_id, fields = entries[0]
        job_id = fields[b"job"].decode() if fields else None
        return QueueEntry(entry_id.decode(), job_id, claimed=True)

    async def renew(self, consumer: str, entry_id: str) -> bool:
        """Reset the entry's idle time, so no other runner takes it; False if another runner already has."""
        return bool(await self._renew(keys=[QUEUE_KEY], args=[GROUP, consumer, entry_id]))

    async def release(self, entry_id: str) -> None:
        """The job is over (or gone): acknowledge and drop its entry."""
        await self._client.xack(QUEUE_KEY, GROUP, entry_id)
        await self._client.xdel(QUEUE_KEY, entry_id)

    async def take(self, job_id: str, owner: str) -> str:
        """Make `owner` the job's runner if it has not ended; returns its state ("missing" if gone)."""
        return (await self._take(keys=[job_key(job_id)], args=[owner, repr(time.time())])).decode()

    async def text(self, job_id: str) -> str:
        """The job's text; TamperedJobDataError if it does not open."""
        value = await self._client.get(text_key(job_id))
        if value is None:
            raise JobNotFoundError(job_id)
        return self._seal.open(text_key(job_id), value, f"job {job_id}'s text").decode("utf-8", "surrogatepass")

    async def state(self, job_id: str) -> tuple[str, str]:
        """The job's state and owner (("missing", "") when it is gone)."""
        state, owner = await self._client.hmget(job_key(job_id), ["state", "owner"])
        return (state or b"missing").decode(), (owner or b"").decode()

    async def commit_sentence(
        self, job_id: str, sentence: int, owner: str, pcm: bytes, *, chars_done: int, samples: int, words: bytes = b"{}"
    ) -> bool:
        """Store sentence `sentence`'s audio, its caption data (`words`, JSON) and the progress after
        it, if `owner` still holds the running job and `sentence` is the first one not done yet; False otherwise."""
        stored = await self._chunks.stage(job_id, sentence, self._seal.seal(pcm_key(job_id, sentence), pcm))
        sealed_words = self._seal.seal(words_key(job_id, sentence), words)
        done = await self._commit(
            keys=[job_key(job_id), pcm_key(job_id, sentence), text_key(job_id), words_key(job_id, sentence)],
            args=[owner, sentence, stored, self.ttl_s, repr(time.time()), chars_done, samples, sealed_words],
        )
        if not done:
            await self._chunks.discard(job_id, stored)
        return bool(done)

    async def finish(self, job_id: str, owner: str, state: str, error: str = "") -> bool:
        """End the job in `state` if `owner` still holds it; then its audio keeps `ttl_s` from now."""
        args: list[Any] = [owner, state, error, repr(time.time()), self.ttl_s]
        ended = bool(await self._finish(keys=[job_key(job_id)], args=args))
        if ended:
            record = await self.get(job_id)
            await self._refresh_ttl(job_id, record.sentences_done)
        return ended

    async def _refresh_ttl(self, job_id: str, sentences: int) -> None:
        keys: Sequence[str] = [text_key(job_id), *(pcm_key(job_id, n) for n in range(sentences)), *(words_key(job_id, n) for n in range(sentences))]
        async with self._client.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.expire(key, self.ttl_s)
            await pipe.execute()
