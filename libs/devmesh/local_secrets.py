"""The secrets of a mesh on one machine, made on first use and kept in the cache folder
($TTS_CACHE_DIR, else ~/.cache/tts-mesh, as for the converted voice), under `devmesh/`:

    tls/            the local CA and the mesh's certificates (libs.devmesh.certs)
    cache-key       the mel cache's AES-256 key (libs.cache.sealing's key file)
    redis-password  the embedded Redis's password

The folder is readable by its owner only. What `make run` starts is secure by default with these:
mutual TLS between the gateway and its workers, a Redis that asks for a password, sealed cache
values. Delete the folder (or run `make certs` for the certificates) to make new ones.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import grpc

from libs.cache.sealing import new_key_line
from libs.devmesh.certs import MeshTls, ensure_mesh_tls, write_file
from libs.devmesh.paths import devmesh_dir

REDIS_PASSWORD_BYTES: Final = 24


@dataclass(frozen=True)
class LocalSecrets:
    """What `make run` hands the services."""

    tls: MeshTls
    """The mesh's certificates."""
    cache_key_file: Path
    """The mel cache's key file (--cache-key-file)."""
    redis_password_file: Path
    """The embedded Redis's password, in a file (--redis-password-file)."""

    @property
    def redis_password(self) -> str:
        """The embedded Redis's password."""
        return self.redis_password_file.read_text(encoding="ascii").strip()

    def service_args(self, service: str) -> list[str]:
        """Flags that give `service` its secrets: workers serve mutual TLS; the gateway dials them
        with its certificate and seals its cache values."""
        if service == "gateway":
            return [*self.tls.gateway_args(), "--cache-key-file", str(self.cache_key_file)]
        return self.tls.worker_args()

    def health_credentials(self, service: str) -> grpc.ChannelCredentials | None:
        """What a health check of `service` needs: the gateway's certificate for a worker; None (plaintext) for the gateway."""
        return None if service == "gateway" else self.tls.client_credentials()


def ensure_local_secrets(directory: Path | None = None) -> LocalSecrets:
    """The secrets in `directory` (default `devmesh_dir()`), each made now if it is missing."""
    directory = directory or devmesh_dir()
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    cache_key_file = directory / "cache-key"
    if not cache_key_file.is_file():
        write_file(cache_key_file, (new_key_line("local-1") + "\n").encode("ascii"), private=True)
    password_file = directory / "redis-password"
    if not password_file.is_file():
        write_file(password_file, secrets.token_urlsafe(REDIS_PASSWORD_BYTES).encode("ascii") + b"\n", private=True)
    return LocalSecrets(ensure_mesh_tls(directory / "tls"), cache_key_file, password_file)
