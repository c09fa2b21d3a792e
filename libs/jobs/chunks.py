"""Where the bytes of a job's sentences live: in Redis with the job (the default), or in an
S3-compatible object store (libs.jobs.objects).

Either way Redis decides which bytes are sentence n's audio: the commit script stores, under
`tts:job:<id>:pcm:<n>`, whatever `stage` returned (the value itself, or the name of the object that
holds it) only if the runner still owns the job. An object staged by a runner that lost its job is
never referenced, so it cannot replace the committed audio; the runner discards it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class ObjectStoreError(Exception):
    """The object store failed or could not be reached (transient: a runner retries, a download fails)."""


class AudioChunks(Protocol):
    """The storage of a job's per-sentence audio values (already sealed when sealing is on)."""

    async def stage(self, job_id: str, sentence: int, value: bytes) -> bytes:
        """Store `value` for sentence `sentence`; returns what the commit keeps in Redis for it."""
        ...

    async def fetch(self, job_id: str, stored: Sequence[bytes | None]) -> list[bytes | None]:
        """The values behind what `stage` returned (None where nothing is stored any more)."""
        ...

    async def discard(self, job_id: str, stored: bytes) -> None:
        """Drop a staged value whose commit was refused."""
        ...

    async def remove(self, job_id: str) -> None:
        """Drop every value stored for the job (its Redis keys are the store's to remove)."""
        ...

    async def close(self) -> None: ...


class InRedis(AudioChunks):
    """The values themselves go into Redis by the commit script: nothing to stage, fetch or remove."""

    async def stage(self, job_id: str, sentence: int, value: bytes) -> bytes:
        return value

    async def fetch(self, job_id: str, stored: Sequence[bytes | None]) -> list[bytes | None]:
        return list(stored)

    async def discard(self, job_id: str, stored: bytes) -> None:
        return None

    async def remove(self, job_id: str) -> None:
        return None

    async def close(self) -> None:
        return None
