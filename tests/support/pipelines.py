"""An utterance pipeline with nothing behind it but the pool a unit test gives it."""

from __future__ import annotations

from typing import Any

from libs.synthesis.admission import Listener
from libs.synthesis.pipeline import UtterancePipeline


def bare_pipeline(pool: Any, listener: Listener | None = None) -> UtterancePipeline:
    """A pipeline on `pool` (a stand-in with only what the test reads) and no cache, voice or params."""
    return UtterancePipeline(
        pool=pool,
        cache=None,  # type: ignore[arg-type]
        flights=None,  # type: ignore[arg-type]
        voice="v",
        params=None,  # type: ignore[arg-type]
        utterance_id="u",
        timeout_s=None,
        listener=listener,
    )
