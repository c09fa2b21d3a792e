"""A job's text and audio sealed at rest with the cache's key ring (libs.cache.sealing), as mel values
are: whoever can read the job Redis or the bucket learns nothing from them, and whoever can write
there cannot make a gateway play audio it did not make (docs/ARCHITECTURE.md, "Long-form jobs").

Each value is bound to its Redis key (`tts:job:<id>:text`, `tts:job:<id>:pcm:<n>`), also when its
bytes live in an object store: a value moved to another job or sentence fails authentication.
"""

from __future__ import annotations

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
