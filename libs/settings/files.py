"""The error of a file a setting names (a key, a certificate, a password) that cannot be used."""

from __future__ import annotations


class SettingFileError(ValueError):
    """A file named by a setting is missing, unreadable or malformed; the message names the flag and
    says what to fix, and never holds the file's secret. A service stops at start-up on one
    (`libs.serving.server.run_service`)."""
