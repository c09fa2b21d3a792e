"""A job's text and audio sealed at rest with the cache's key ring (libs.cache.sealing), as mel values
are: whoever can read the job Redis or the bucket learns nothing from them, and whoever can write
there cannot make a gateway play audio it did not make (docs/ARCHITECTURE.md, "Long-form jobs").

Each value is bound to its Redis key (`tts:job:<id>:text`, `tts:job:<id>:pcm:<n>`), also when its
bytes live in an object store: a value moved to another job or sentence fails authentication.
"""

from __future__ import annotations

import hashlib
import hmac

from libs.cache.sealing import KeyRing, SealError


class TamperedJobDataError(Exception):
    """A stored job value that does not open: altered, moved, or sealed with a key this gateway lacks.
    It is refused, never spoken or served."""


class JobSeal:
    """Seals with the key ring when there is one; without one, values are stored and read plain."""

    def __init__(self, keyring: KeyRing | None) -> None:
        self._keyring = keyring

    def seal(self, redis_key: str, plain: bytes) -> bytes:
        return self._keyring.seal(redis_key, plain) if self._keyring is not None else plain

    def open(self, redis_key: str, value: bytes, what: str) -> bytes:
        """The plain value; TamperedJobDataError naming `what` (e.g. "job X's text") if it does not open."""
        if self._keyring is None:
            return value
        try:
            return self._keyring.unseal(redis_key, value)
        except SealError as error:
            raise TamperedJobDataError(
                f"{what} does not open ({error}); it was altered or sealed with a key this gateway does not have, "
                "so it is refused (create the job again)"
            ) from None

    def fingerprint(self, request: bytes) -> str:
        """What is kept of a request to tell a retried create from another under the same key: with
        a key ring a keyed digest (reading the job Redis does not confirm a guessed text), else a
        plain one."""
        if self._keyring is not None:
            digest = self._keyring.digest(request)
            assert digest is not None  # the current key is always in the ring
            return digest
        return _plain_fingerprint(request)

    def same_request(self, held: str, request: bytes) -> bool:
        """Whether `held` (a `fingerprint`) was made of `request`: under the key it names, if this
        ring still has it (a key rotated in since keeps a retried create the same request)."""
        key_id, separator, _ = held.partition(":")
        ours = self._keyring.digest(request, key_id) if separator and self._keyring is not None else _plain_fingerprint(request)
        return ours is not None and hmac.compare_digest(ours, held)


def _plain_fingerprint(request: bytes) -> str:
    return hashlib.sha256(request).hexdigest()[:32]
