"""Where the mel cache lives, how long it keeps a sentence, and the keys that seal its values."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit, urlunsplit

from libs.settings.fields import setting

DEFAULT_REDIS_URL: Final = "redis://127.0.0.1:6379/0"
DEFAULT_TTL_S: Final = 300
# Redis answers on a LAN in well under a millisecond; 100 ms means it is sick, and a miss (the
# request is synthesised) is cheaper than waiting on it.
DEFAULT_TIMEOUT_MS: Final = 100
DEFAULT_HEAD_MS: Final = 200.0
"""More than the audio of the vocoder's first step (11 frames, 128 ms), so on a hit the vocoder's first
steps run while the client plays the head, and the client never waits for them; small next to the
mel: 200 ms of float32 at 22,050 Hz is 17.6 KB a sentence, the float16 mel of a 2.5 s sentence 34 KB."""
MAX_HEAD_MS: Final = 5000.0
"""A head is a start, not a copy of the sentence's audio."""
DISABLED_URLS: Final = ("", "none")
"""Redis URLs that switch the cache off."""


@dataclass(frozen=True)
class CacheSettings:
    """The gateway's mel cache."""

    redis_url: str = setting(
        DEFAULT_REDIS_URL, env="REDIS_URL", flag="--redis-url",
        doc='Redis of the mel cache: redis:// or rediss:// (TLS), user in the URL for an ACL user, "{zone}" replaced by '
        "the gateway's zone (a Redis per zone); \"none\" switches the cache off",
    )  # fmt: skip
    redis_cluster: bool = setting(
        False, env="TTS_REDIS_CLUSTER", flag="--redis-cluster",
        doc="--redis-url names a node of a Redis Cluster (the client follows the cluster's slots)",
    )  # fmt: skip
    redis_ca_file: str = setting(
        "", env="TTS_REDIS_CA", flag="--redis-ca",
        doc="PEM CA that a rediss:// server's certificate must come from (empty: the system's CAs)",
    )  # fmt: skip
    ttl_s: int = setting(DEFAULT_TTL_S, env="TTS_CACHE_TTL_S", flag="--cache-ttl-s", unit="s", minimum=1, doc="lifetime of a cached sentence")
    timeout_ms: int = setting(
        DEFAULT_TIMEOUT_MS, env="TTS_CACHE_TIMEOUT_MS", flag="--cache-timeout-ms", unit="ms", minimum=1,
        doc="socket timeout of each Redis call, after which the cache fails open (a miss)",
    )  # fmt: skip
    audio_head_ms: float = setting(
        DEFAULT_HEAD_MS, env="TTS_AUDIO_HEAD_MS", unit="ms", minimum=0, maximum=MAX_HEAD_MS,
        doc="first audio of each cached sentence kept next to its mel, so a hit speaks at once (0: mel only)",
    )  # fmt: skip
    key_file: str = setting(
        "", env="TTS_CACHE_KEY_FILE", flag="--cache-key-file",
        doc="file of AES-256 keys (KEY_ID:BASE64 lines, the first seals) that encrypt and authenticate every cached value (empty: stored plain)",
    )  # fmt: skip
    redis_password_file: str = setting(
        "", env="TTS_REDIS_PASSWORD_FILE", doc="file holding the Redis password, for a --redis-url without one (empty: none)"
    )

    def __post_init__(self) -> None:
        if self.redis_password_file and urlsplit(self.redis_url).password:
            raise ValueError("--redis-url already has a password: give it there or in --redis-password-file, not both")

    @property
    def enabled(self) -> bool:
        """Whether a Redis is configured at all."""
        return self.redis_url.strip().lower() not in DISABLED_URLS

    def url_for_zone(self, zone: str) -> str:
        """`redis_url` with "{zone}" replaced by `zone`: each zone's gateways use their own zone's Redis."""
        return self.redis_url.replace("{zone}", zone)


def redacted_url(url: str) -> str:
    """`url` with its password (if any) replaced by "***": the only form of a Redis URL that may be logged."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port else ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}{port}"))
