"""Where a sentence lives in Redis: its mel under a hash of its synthesis inputs, its audio head
next to it.

Both keys of a sentence derive from one digest, written as a Redis Cluster hash tag
(`tts:mel:v1:{<digest>}`, `tts:head:v1:{<digest>}`): only the part in braces picks the slot, so a
sentence's two keys always share a slot and are still read together in one MGET on a cluster (and
on managed Redis that refuses cross-slot commands); different sentences spread over every slot.
"""

from __future__ import annotations

import hashlib
from typing import Final

from libs.voice.inputs import SynthesisInputs
from libs.voice.tiers import QUALITY, SPOKEN

FORMAT_VERSION: Final = 1
"""Layout version of the values (libs.cache.codec); part of every key, so a new layout never reads an old one."""
KEY_PREFIX: Final = f"tts:mel:v{FORMAT_VERSION}:"
HEAD_KEY_PREFIX: Final = f"tts:head:v{FORMAT_VERSION}:"


def cache_key(inputs: SynthesisInputs) -> str:
    """The key of a sentence's mel: a hash of exactly what its audio is a function of, as a hash tag."""
    return KEY_PREFIX + "{" + hashlib.sha256(inputs.digest_bytes()).hexdigest() + "}"


def head_key(mel_key: str, tier: str = "") -> str:
    """The key of the audio head of the sentence whose mel is cached at `mel_key`, as `tier` speaks it
    ("": the quality tier). Both tiers vocode the same mel, so they share its entry, but each has its
    own head: `tts:head:v1:{<digest>}` for quality, `tts:head:v1:<tier>:{<digest>}` for another
    (the same hash tag, so the same slot)."""
    if not mel_key.startswith(KEY_PREFIX):
        raise ValueError(f"{mel_key!r} is not a mel cache key")
    tier_part = f"{tier}:" if tier and tier != QUALITY else ""
    return HEAD_KEY_PREFIX + tier_part + mel_key[len(KEY_PREFIX) :]


def head_keys(mel_key: str) -> list[str]:
    """The keys of every tier's audio head of the sentence whose mel is cached at `mel_key`."""
    return [head_key(mel_key, tier) for tier in SPOKEN]
