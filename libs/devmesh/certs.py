"""A local certificate authority for the mesh's mutual TLS on one machine (`make run`, the tests).

`ensure_mesh_tls(directory)` makes, once, a CA and two certificates it signs:

- the workers' server certificate, for `localhost`, 127.0.0.1 and ::1 (gRPC checks the name the
  gateway dials against these; a worker elsewhere needs its own name, see k8s/ for Kubernetes);
- the gateway's client certificate, which the workers require.

Keys are ECDSA P-256, written readable by their owner only. `make certs` (`python -m
libs.devmesh.certs --renew`) makes them again; certificates that are about to expire are made again
on the next start. Production does not use this: cert-manager issues the mesh's certificates there.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from libs.devmesh.paths import devmesh_dir

CA_DAYS: Final = 3650
LEAF_DAYS: Final = 825
RENEW_BEFORE_DAYS: Final = 30
"""A certificate with fewer days left is made again at start."""
WORKER_DNS_NAMES: Final = ("localhost",)
WORKER_IP_ADDRESSES: Final = ("127.0.0.1", "::1")
_FILES: Final = ("ca.pem", "ca-key.pem", "worker.pem", "worker-key.pem", "gateway.pem", "gateway-key.pem")


@dataclass(frozen=True)
class MeshTls:
    """The mesh's TLS files in one folder, and the flags that hand them to the services."""

    directory: Path

    @property
    def ca(self) -> Path:
        """The CA certificate both sides trust."""
        return self.directory / "ca.pem"

    @property
    def worker_cert(self) -> Path:
        return self.directory / "worker.pem"

    @property
    def worker_key(self) -> Path:
        return self.directory / "worker-key.pem"

    @property
    def gateway_cert(self) -> Path:
        return self.directory / "gateway.pem"

    @property
    def gateway_key(self) -> Path:
        return self.directory / "gateway-key.pem"

    def worker_args(self) -> list[str]:
        """A worker's flags: serve mutual TLS, asking for client certificates from the CA."""
        return ["--tls-cert", str(self.worker_cert), "--tls-key", str(self.worker_key), "--tls-client-ca", str(self.ca)]

    def gateway_args(self) -> list[str]:
        """A gateway's flags: verify the workers against the CA, show them the gateway's certificate."""
        return ["--upstream-ca", str(self.ca), "--upstream-cert", str(self.gateway_cert), "--upstream-key", str(self.gateway_key)]

    def client_credentials(self) -> grpc.ChannelCredentials:
        """Channel credentials with the gateway's certificate: what a worker lets in (health checks, tests)."""
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca.read_bytes(),
            private_key=self.gateway_key.read_bytes(),
            certificate_chain=self.gateway_cert.read_bytes(),
        )

    def server_credentials(self) -> grpc.ServerCredentials:
        """Server credentials of a worker (for stand-in workers in tests)."""
        return grpc.ssl_server_credentials(
            [(self.worker_key.read_bytes(), self.worker_cert.read_bytes())],
            root_certificates=self.ca.read_bytes(),
            require_client_auth=True,
        )


def ensure_mesh_tls(directory: Path, *, renew: bool = False) -> MeshTls:
    """The mesh's TLS files in `directory`, made now if any is missing, expiring, or `renew` is set."""
    tls = MeshTls(directory)
    if renew or not _usable(tls):
        make_mesh_tls(directory)
    return tls


def make_mesh_tls(directory: Path) -> MeshTls:
    """Make a new CA and the workers' and the gateway's certificates in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"tts-mesh local CA {now:%Y-%m-%d %H:%M:%S}")])
    ca = (
        _builder(ca_name, ca_name, ca_key.public_key(), now, CA_DAYS)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(cert_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    sans: list[x509.GeneralName] = [x509.DNSName(name) for name in WORKER_DNS_NAMES]
    sans += [x509.IPAddress(ipaddress.ip_address(address)) for address in WORKER_IP_ADDRESSES]
    worker_key, worker = _leaf(ca, ca_key, "tts-mesh worker", sans, ExtendedKeyUsageOID.SERVER_AUTH, now)
    gateway_key, gateway = _leaf(ca, ca_key, "tts-mesh gateway", [x509.DNSName("gateway")], ExtendedKeyUsageOID.CLIENT_AUTH, now)
    tls = MeshTls(directory)
    write_file(directory / "ca-key.pem", _key_pem(ca_key), private=True)
    write_file(tls.worker_key, _key_pem(worker_key), private=True)
    write_file(tls.gateway_key, _key_pem(gateway_key), private=True)
    write_file(tls.worker_cert, worker.public_bytes(serialization.Encoding.PEM))
    write_file(tls.gateway_cert, gateway.public_bytes(serialization.Encoding.PEM))
    write_file(tls.ca, ca.public_bytes(serialization.Encoding.PEM))  # last: its presence says the set is complete
    return tls


def _usable(tls: MeshTls) -> bool:
    if not all((tls.directory / name).is_file() for name in _FILES):
        return False
    renew_after = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=RENEW_BEFORE_DAYS)
    try:
        certificates = [x509.load_pem_x509_certificate(path.read_bytes()) for path in (tls.ca, tls.worker_cert, tls.gateway_cert)]
    except ValueError:
        return False
    return all(certificate.not_valid_after_utc > renew_after for certificate in certificates)


def _builder(subject: x509.Name, issuer: x509.Name, public_key, now: datetime.datetime, days: int) -> x509.CertificateBuilder:  # type: ignore[no-untyped-def]
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))  # tolerate a little clock skew
        .not_valid_after(now + datetime.timedelta(days=days))
    )


def _key_usage(*, cert_sign: bool = False) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not cert_sign, content_commitment=False, key_encipherment=False, data_encipherment=False,
        key_agreement=False, key_cert_sign=cert_sign, crl_sign=cert_sign, encipher_only=False, decipher_only=False,
    )  # fmt: skip


def _leaf(
    ca: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    common_name: str,
    sans: Sequence[x509.GeneralName],
    usage: x509.ObjectIdentifier,
    now: datetime.datetime,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    certificate = (
        _builder(subject, ca.subject, key.public_key(), now, LEAF_DAYS)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return key, certificate


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def write_file(path: Path, data: bytes, *, private: bool = False) -> None:
    """Write `path` whole or not at all (a new file renamed over the old), owner-only when `private`."""
    temporary = path.with_name(path.name + ".tmp")
    temporary.unlink(missing_ok=True)  # a leftover would keep its old permissions
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(descriptor, "wb") as file:
        file.write(data)
    os.replace(temporary, path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Make the local mesh's CA and certificates (what `make run` uses).")
    parser.add_argument("--dir", type=Path, default=None, help="where (default: the tls folder of the local secrets)")
    parser.add_argument("--renew", action="store_true", help="make new ones even if the current ones are valid")
    args = parser.parse_args(argv)
    directory = args.dir or devmesh_dir() / "tls"
    tls = ensure_mesh_tls(directory, renew=args.renew)
    print(f"mesh CA and certificates in {tls.directory}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
