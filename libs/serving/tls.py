"""TLS credentials of the services, read from PEM files: the server side (a worker's mTLS port, the
gateway's public port) and the client side (the gateway's channels to its workers).

Files are checked when they are read, so a wrong path, a key that belongs to another certificate or
a file that is not PEM stops a service at start-up with a message naming the flag, not at the first
handshake. A server re-reads its files when they change (checked at most once a second, at a
handshake), so a renewed certificate (cert-manager rewrites the mounted Secret) is served without a
restart; a changed file that does not load is logged and the previous certificate kept.

Kubernetes' gRPC probes speak plaintext only, so a service whose port needs TLS can also serve
grpc.health.v1, and nothing else, on a plaintext `--health-port` (`probe_server`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from grpc_health.v1 import health, health_pb2_grpc

from libs.settings.files import SettingFileError

_log = logging.getLogger(__name__)

OWN_PORT_OPTION: Final = ("grpc.so_reuseport", 0)
"""A gRPC server argument: a taken port fails to bind instead of being shared. gRPC sets SO_REUSEPORT by
default, and a second server on a taken port (a second worker started by mistake, or two that asked
for port 0 at once) would bind anyway and silently take part of the connections."""
RELOAD_CHECK_S: Final = 1.0
"""Least time between two looks at a server's certificate files for changes."""


class TlsFileError(SettingFileError):
    """A certificate, key or CA file that cannot be used; the message names its flag and what is wrong."""


@dataclass(frozen=True)
class PemFile:
    """A PEM file named by a setting."""

    path: str
    """Where it is."""
    flag: str
    """The flag that names it, for messages."""

    def read(self) -> bytes:
        """Its bytes; TlsFileError if it cannot be read."""
        try:
            return Path(self.path).read_bytes()
        except OSError as error:
            raise TlsFileError(f"{self.flag} {self.path}: cannot read it ({error.strerror or error})") from None

    def signature(self) -> tuple[int, int, int]:
        """See `file_signature`."""
        return file_signature(self.path)


def file_signature(path: str) -> tuple[int, int, int]:
    """What changes when a file is rewritten or replaced (a Kubernetes Secret volume swaps a symlink):
    (mtime ns, size, inode) of what `path` leads to; zeros while it is missing."""
    try:
        stat = os.stat(path)
    except OSError:
        return (0, 0, 0)
    return (stat.st_mtime_ns, stat.st_size, stat.st_ino)


def load_certificates(file: PemFile) -> list[x509.Certificate]:
    """The certificates of a PEM file (a chain or a CA bundle); TlsFileError if there are none."""
    data = file.read()
    try:
        certificates = x509.load_pem_x509_certificates(data)
    except ValueError:
        certificates = []
    if not certificates:
        raise TlsFileError(f"{file.flag} {file.path}: not a PEM certificate (expected -----BEGIN CERTIFICATE-----)")
    return certificates


def load_key_pair(cert: PemFile, key: PemFile) -> tuple[bytes, bytes]:
    """(key PEM, certificate chain PEM), checked to belong together; TlsFileError otherwise."""
    chain = load_certificates(cert)
    key_bytes = key.read()
    try:
        private_key = serialization.load_pem_private_key(key_bytes, password=None)
    except (ValueError, TypeError):
        raise TlsFileError(f"{key.flag} {key.path}: not an unencrypted PEM private key") from None
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    if private_key.public_key().public_bytes(serialization.Encoding.DER, public) != chain[0].public_key().public_bytes(
        serialization.Encoding.DER, public
    ):
        raise TlsFileError(f"{key.flag} {key.path} is not the key of the certificate in {cert.flag} {cert.path}")
    return key_bytes, cert.read()


class _ServerCertificates:
    """The files of a TLS server port, re-read when they change (gRPC asks at every handshake)."""

    def __init__(self, cert: PemFile, key: PemFile, client_ca: PemFile | None) -> None:
        self._files = [file for file in (cert, key, client_ca) if file is not None]
        self._cert, self._key, self._client_ca = cert, key, client_ca
        self._lock = threading.Lock()
        self._signature = self._signatures()
        self._checked_s = time.monotonic()
        self.initial = self._configuration()

    def _signatures(self) -> list[tuple[int, int, int]]:
        return [file.signature() for file in self._files]

    def _configuration(self) -> grpc.ServerCertificateConfiguration:
        key_bytes, chain = load_key_pair(self._cert, self._key)
        roots = None
        if self._client_ca is not None:
            load_certificates(self._client_ca)
            roots = self._client_ca.read()
        return grpc.ssl_server_certificate_configuration([(key_bytes, chain)], root_certificates=roots)

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """gRPC's certificate fetcher: a new configuration when the files changed, else None (keep the current)."""
        with self._lock:
            now_s = time.monotonic()
            if now_s - self._checked_s < RELOAD_CHECK_S:
                return None
            self._checked_s = now_s
            signature = self._signatures()
            if signature == self._signature:
                return None
            self._signature = signature
            try:
                configuration = self._configuration()
            except TlsFileError as error:
                _log.error("keeping the previous certificate: %s", error)
                return None
            _log.info("certificate files changed (%s): serving the new certificate", self._cert.path)
            return configuration


def server_credentials(cert_path: str, key_path: str, client_ca_path: str = "") -> grpc.ServerCredentials:
    """Credentials of a TLS port serving `cert_path` with `key_path`; with `client_ca_path`, callers
    must present a certificate issued by that CA (mutual TLS)."""
    client_ca = PemFile(client_ca_path, "--tls-client-ca") if client_ca_path else None
    certificates = _ServerCertificates(PemFile(cert_path, "--tls-cert"), PemFile(key_path, "--tls-key"), client_ca)
    return grpc.dynamic_ssl_server_credentials(
        certificates.initial, certificates.fetch, require_client_authentication=client_ca is not None
    )


def channel_credentials(ca: PemFile, cert: PemFile | None = None, key: PemFile | None = None) -> grpc.ChannelCredentials:
    """Credentials of a client that trusts only servers with a certificate from `ca`, and presents
    `cert`/`key` to them when given (mutual TLS). Read once: a channel keeps them for its life."""
    load_certificates(ca)
    if cert is None or key is None:
        return grpc.ssl_channel_credentials(root_certificates=ca.read())
    key_bytes, chain = load_key_pair(cert, key)
    return grpc.ssl_channel_credentials(root_certificates=ca.read(), private_key=key_bytes, certificate_chain=chain)


async def probe_server(health_servicer: health.aio.HealthServicer, host: str, port: int) -> grpc.aio.Server:
    """Start a plaintext server with only `health_servicer` on it (for probes that cannot speak TLS)."""
    server = grpc.aio.server(options=[OWN_PORT_OPTION])
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    try:
        bound = server.add_insecure_port(f"{host}:{port}")
    except RuntimeError:  # grpc's "Failed to bind to address"
        bound = 0
    if bound == 0:
        await server.stop(None)
        raise OSError(f"cannot listen on the health port {host}:{port}: another process listens there; choose another --health-port")
    await server.start()
    return server
