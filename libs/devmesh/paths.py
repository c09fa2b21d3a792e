"""Where a mesh on one machine keeps what it makes on first use."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

CACHE_DIR_ENV: Final = "TTS_CACHE_DIR"
"""Environment variable naming the cache folder."""
DEFAULT_CACHE_DIR: Final = Path("~/.cache/tts-mesh")
"""The cache folder when CACHE_DIR_ENV is unset: the same folder libs.models.piper_import caches the
converted voice in (not imported from there: that module pulls in torch)."""


def devmesh_dir() -> Path:
    """Where the local secrets live."""
    return Path(os.environ.get(CACHE_DIR_ENV) or DEFAULT_CACHE_DIR).expanduser() / "devmesh"
