"""Where the mel cache lives and how long it keeps a sentence."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from libs.settings.fields import setting

DEFAULT_REDIS_URL: Final = "redis://127.0.0.1:6379/0"
DEFAULT_TTL_S: Final = 300
# Redis answers on a LAN in well under a millisecond; 100 ms means it is sick, and a miss (the
# request is synthesised) is cheaper than waiting on it.
DEFAULT_TIMEOUT_MS: Final = 100
DEFAULT_HEAD_MS: Final = 200.0
"""More than the vocoder's first step gives (11 frames, 128 ms), so the vocoder's first two steps
(~25 ms of work on a cache hit) run while the client plays the head; small enough to add only ~17 KB
per sentence to Redis (the mel of a 2.5 s sentence is ~34 KB)."""
MAX_HEAD_MS: Final = 5000.0
"""A head is a start, not a copy of the sentence's audio."""
DISABLED_URLS: Final = ("", "none")
"""Redis URLs that switch the cache off."""


@dataclass(frozen=True)
class CacheSettings:
    """The gateway's mel cache."""

    redis_url: str = setting(
        DEFAULT_REDIS_URL, env="REDIS_URL", flag="--redis-url", doc='Redis of the mel cache ("none" switches the cache off)'
    )
    ttl_s: int = setting(DEFAULT_TTL_S, env="TTS_CACHE_TTL_S", flag="--cache-ttl-s", unit="s", minimum=1, doc="lifetime of a cached sentence")
    timeout_ms: int = setting(
        DEFAULT_TIMEOUT_MS, env="TTS_CACHE_TIMEOUT_MS", flag="--cache-timeout-ms", unit="ms", minimum=1,
        doc="socket timeout of each Redis call, after which the cache fails open (a miss)",
    )  # fmt: skip
    audio_head_ms: float = setting(
        DEFAULT_HEAD_MS, env="TTS_AUDIO_HEAD_MS", unit="ms", minimum=0, maximum=MAX_HEAD_MS,
        doc="first audio of each cached sentence kept next to its mel, so a hit speaks at once (0: mel only)",
    )  # fmt: skip

    @property
    def enabled(self) -> bool:
        """Whether a Redis is configured at all."""
        return self.redis_url.strip().lower() not in DISABLED_URLS
