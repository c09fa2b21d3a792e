"""What the gateway keeps warm in the mel cache (libs.prewarm)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from libs.settings.fields import setting

DEFAULT_RELOAD_S: Final = 5.0
"""How often the hot-text file's modification time is checked (a ConfigMap update lands within ~1 min anyway)."""
# Three requests in a minute: a sentence a few users hear in a row (a notification, an IVR prompt),
# not one a single user repeats.
DEFAULT_PROMOTE_AFTER: Final = 3
DEFAULT_PROMOTE_WINDOW_S: Final = 60.0
DEFAULT_PROMOTED_KEEP_S: Final = 3600.0
DEFAULT_MAX_HOT_SENTENCES: Final = 10_000
"""At ~50 KiB of mel and head a sentence, 10,000 hot sentences hold ~0.5 GiB of Redis."""


@dataclass(frozen=True)
class PrewarmSettings:
    """Prewarming: a hot-text list and promotion of often-requested sentences, kept in the cache."""

    hot_texts_file: str = setting(
        "", env="TTS_HOT_TEXTS_FILE",
        doc="file of texts to keep in the cache, one a line (# comments), reloaded when it changes (empty: none)",
    )  # fmt: skip
    hot_texts_reload_s: float = setting(
        DEFAULT_RELOAD_S, env="TTS_HOT_TEXTS_RELOAD_S", unit="s", minimum=0.1, maximum=3600,
        doc="how often the hot-text file is checked for changes",
    )  # fmt: skip
    promote_after: int = setting(
        DEFAULT_PROMOTE_AFTER, env="TTS_PROMOTE_AFTER", unit="requests", minimum=0,
        doc="a sentence requested this many times within --promote-window-s is kept warm like a hot text (0: no promotion)",
    )  # fmt: skip
    promote_window_s: float = setting(
        DEFAULT_PROMOTE_WINDOW_S, env="TTS_PROMOTE_WINDOW_S", unit="s", minimum=1, maximum=86_400,
        doc="window in which a sentence's requests are counted for promotion",
    )  # fmt: skip
    promoted_keep_s: float = setting(
        DEFAULT_PROMOTED_KEEP_S, env="TTS_PROMOTED_KEEP_S", unit="s", minimum=1, maximum=30 * 86_400,
        doc="how long a promoted sentence is kept warm after its last promotion",
    )  # fmt: skip
    max_hot_sentences: int = setting(
        DEFAULT_MAX_HOT_SENTENCES, env="TTS_MAX_HOT_SENTENCES", unit="sentences", minimum=0,
        doc="most sentences kept warm (hot texts first, then the most recently promoted)",
    )  # fmt: skip
