"""A job's audio in an S3-compatible object store (AWS S3, MinIO, Ceph, ...), through aiobotocore:
the option for deployments whose audio outgrows Redis (docs/ARCHITECTURE.md, "Long-form jobs").

Each committed sentence is one object, `<prefix><job id>/<sentence, 7 digits>-<random>`, written
before the commit script stores its name in Redis. The random part keeps an object staged by a
runner that lost its job (a takeover, a cancel) from replacing the committed one; that runner deletes
it. A sentence's audio is a few seconds of PCM, far below the single-PUT limit, so no multipart
upload is needed.

Expiry: deleting a job deletes its objects at once. A job that simply expires in Redis leaves its
objects unreferenced (unreachable through the API); the bucket's lifecycle rule removes them (see
docs/ARCHITECTURE.md, "Long-form jobs", for the rule). This process never changes the bucket's
configuration.

Credentials and region come from botocore's usual chain (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
AWS_SESSION_TOKEN, AWS_DEFAULT_REGION, a profile, an instance or pod role).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from contextlib import AsyncExitStack
from typing import Any, Final
from urllib.parse import urlsplit

import aiohttp
from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore.exceptions import BotoCoreError, ClientError

from libs.jobs.chunks import AudioChunks, ObjectStoreError
from libs.jobs.sealed import TamperedJobDataError

_log = logging.getLogger(__name__)
DELETE_BATCH: Final = 1000
"""DeleteObjects takes at most 1000 keys a call."""
_MISSING_CODES: Final = frozenset(("NoSuchKey", "404"))
_FAILURES: Final = (BotoCoreError, ClientError, aiohttp.ClientError, asyncio.TimeoutError)
"""What a call to the store raises when it fails: botocore's errors, and aiohttp's while a body streams."""


def bucket_and_prefix(url: str) -> tuple[str, str]:
    """("bucket", "prefix/") of `s3://bucket/prefix` (the prefix "" when none is given)."""
    parts = urlsplit(url)
    prefix = parts.path.strip("/")
    return parts.netloc, f"{prefix}/" if prefix else ""


class ObjectStoreChunks(AudioChunks):
    """Sentences' audio as objects in one bucket under one prefix."""

    def __init__(self, bucket: str, prefix: str, endpoint_url: str = "") -> None:
        self.bucket = bucket
        self.prefix = prefix
        self._endpoint_url = endpoint_url or None
        self._exit = AsyncExitStack()
        self._client: Any = None
        self._opening = asyncio.Lock()

    @classmethod
    def from_url(cls, url: str, endpoint_url: str = "") -> ObjectStoreChunks:
        bucket, prefix = bucket_and_prefix(url)
        return cls(bucket, prefix, endpoint_url)

    def job_prefix(self, job_id: str) -> str:
        return f"{self.prefix}{job_id}/"

    async def stage(self, job_id: str, sentence: int, value: bytes) -> bytes:
        name = f"{self.job_prefix(job_id)}{sentence:07d}-{uuid.uuid4().hex[:16]}"
        client = await self._opened()
        try:
            await client.put_object(Bucket=self.bucket, Key=name, Body=value, ContentType="application/octet-stream")
        except _FAILURES as error:
            raise self._failed("write", name, error) from None
        return name.encode()

    async def fetch(self, job_id: str, stored: Sequence[bytes | None]) -> list[bytes | None]:
        names = [self._checked_name(job_id, value) if value else None for value in stored]
        return list(await asyncio.gather(*(self._read(name) for name in names)))

    async def discard(self, job_id: str, stored: bytes) -> None:
        """Best effort: an object left behind is never referenced, and the bucket's lifecycle rule removes it."""
        try:
            await self._delete([self._checked_name(job_id, stored)])
        except ObjectStoreError as error:
            _log.warning("job %s: an unused audio object stays until the bucket's lifecycle rule: %s", job_id, error)

    async def remove(self, job_id: str) -> None:
        client = await self._opened()
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.job_prefix(job_id))
        names: list[str] = []
        try:
            async for page in pages:
                names.extend(item["Key"] for item in page.get("Contents", []))
        except _FAILURES as error:
            raise self._failed("list", self.job_prefix(job_id), error) from None
        await self._delete(names)

    async def close(self) -> None:
        await self._exit.aclose()
        self._client = None

    async def _opened(self) -> Any:
        """The client, made on first use: aiobotocore's client lives in the event loop that uses it."""
        async with self._opening:
            if self._client is None:
                config = AioConfig(
                    connect_timeout=5, read_timeout=30, retries={"max_attempts": 3, "mode": "standard"},
                    # S3-compatible servers are addressed by path (no wildcard DNS for bucket names) and do not
                    # all take the CRC checksums botocore adds to every request by default.
                    s3={"addressing_style": "path"} if self._endpoint_url else None,
                    request_checksum_calculation="when_required", response_checksum_validation="when_required",
                )  # fmt: skip
                creator = get_session().create_client("s3", endpoint_url=self._endpoint_url, config=config)
                self._client = await self._exit.enter_async_context(creator)
            return self._client

    async def _read(self, name: str | None) -> bytes | None:
        if name is None:
            return None
        client = await self._opened()
        try:
            answer = await client.get_object(Bucket=self.bucket, Key=name)
            async with answer["Body"] as body:
                return await body.read()
        except _FAILURES as error:
            if isinstance(error, ClientError) and error.response.get("Error", {}).get("Code") in _MISSING_CODES:
                return None  # removed by the bucket's lifecycle rule
            raise self._failed("read", name, error) from None

    async def _delete(self, names: Sequence[str]) -> None:
        client = await self._opened()
        for start in range(0, len(names), DELETE_BATCH):
            batch = [{"Key": name} for name in names[start : start + DELETE_BATCH]]
            try:
                await client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})
            except _FAILURES as error:
                raise self._failed("delete", batch[0]["Key"], error) from None

    def _checked_name(self, job_id: str, stored: bytes) -> str:
        """The object name Redis holds for a sentence, refused unless it is one of the job's own objects
        (a rewritten reference must not make the gateway serve another object of the bucket)."""
        name = stored.decode("utf-8", "replace")
        if not name.startswith(self.job_prefix(job_id)) or ".." in name:
            raise TamperedJobDataError(f"job {job_id}'s audio reference {name[:80]!r} is not one of its objects; it is refused")
        return name

    def _failed(self, action: str, name: str, error: Exception) -> ObjectStoreError:
        return ObjectStoreError(f"object store: could not {action} s3://{self.bucket}/{name}: {error}")
