"""The errors of what a setting names: a file (a key, a certificate, a password) that cannot be used, or a
server that is not of the kind the setting says."""

from __future__ import annotations


class SettingFileError(ValueError):
    """A file named by a setting is missing, unreadable or malformed; the message names the flag and
    says what to fix, and never holds the file's secret. A service stops at start-up on one
    (`libs.serving.server.run_service`)."""


class SettingTargetError(ValueError):
    """A setting names a server of another kind than it says (a Redis Cluster node where one Redis is
    needed, or the reverse); the message names the flag and what to set instead. A service stops at
    start-up on one (`libs.serving.server.run_service`)."""
