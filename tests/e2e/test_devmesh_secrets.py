"""The secrets `make run` makes on first run (certificates, cache key, Redis password), the embedded
Redis with a password, and that the password and the plain cache layout stay out of sight.

The session mesh (tests/conftest.py) is started with these very secrets, so its checks here are on
what `make run` runs.
"""

from __future__ import annotations

import datetime
import re
import stat
import uuid
from pathlib import Path

import pytest
import redis
from cryptography import x509

from libs.cache.sealing import KeyRing
from libs.devmesh import certs
from libs.devmesh.certs import ensure_mesh_tls
from libs.devmesh.embedded_redis import EmbeddedRedis, EmbeddedRedisConfig
from libs.devmesh.local_secrets import ensure_local_secrets
from scripts.run_zones import zone_specs
from services.settings import load_gateway_settings, load_worker_settings
from tests.support.client import synthesize
from tests.support.mesh import Mesh
from tests.support.ports import free_port


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_local_secrets_are_made_once_readable_by_their_owner_only(tmp_path: Path) -> None:
    directory = tmp_path / "devmesh"
    first = ensure_local_secrets(directory)
    assert _mode(directory) == 0o700 and _mode(first.tls.directory) == 0o700
    for private in (first.cache_key_file, first.redis_password_file, first.tls.worker_key, first.tls.gateway_key, first.tls.directory / "ca-key.pem"):
        assert _mode(private) == 0o600, private
    assert KeyRing.from_file(first.cache_key_file).current_id == "local-1"
    assert len(first.redis_password) >= 32
    contents = {path: path.read_bytes() for path in directory.rglob("*") if path.is_file()}
    again = ensure_local_secrets(directory)
    assert {path: path.read_bytes() for path in directory.rglob("*") if path.is_file()} == contents
    assert again.redis_password == first.redis_password


def test_the_flags_hand_each_service_its_secrets_as_the_services_read_them(tmp_path: Path) -> None:
    secrets = ensure_local_secrets(tmp_path / "devmesh")
    worker = load_worker_settings("acoustic", secrets.service_args("acoustic"), {}).server
    assert (worker.tls_cert, worker.tls_key, worker.tls_client_ca) == (str(secrets.tls.worker_cert), str(secrets.tls.worker_key), str(secrets.tls.ca))
    gateway = load_gateway_settings(secrets.service_args("gateway"), {})
    assert gateway.upstream.tls_ca == str(secrets.tls.ca) and gateway.upstream.tls_cert == str(secrets.tls.gateway_cert)
    assert gateway.cache.key_file == str(secrets.cache_key_file)
    assert gateway.server.tls_cert == ""  # the public port stays plaintext in `make run`
    assert secrets.health_credentials("gateway") is None and secrets.health_credentials("vocoder") is not None
    specs = zone_specs(secrets)  # `make run-zones`
    for spec in specs:
        assert all(flag in spec.args for flag in secrets.service_args(spec.service)), spec.name
        assert (spec.credentials is None) == (spec.service == "gateway")


def test_make_certs_makes_a_new_ca_and_a_certificate_near_its_end_is_made_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = tmp_path / "tls"
    tls = ensure_mesh_tls(directory)
    ca = tls.ca.read_bytes()
    assert ensure_mesh_tls(directory).ca.read_bytes() == ca
    assert certs.main(["--dir", str(directory), "--renew"]) == 0
    renewed = tls.ca.read_bytes()
    assert renewed != ca
    monkeypatch.setattr(certs, "LEAF_DAYS", certs.RENEW_BEFORE_DAYS - 1)
    ensure_mesh_tls(directory, renew=True)
    short_lived = tls.ca.read_bytes()
    monkeypatch.undo()
    assert ensure_mesh_tls(directory).ca.read_bytes() != short_lived  # expiring within 30 days: made again
    worker = x509.load_pem_x509_certificate(tls.worker_cert.read_bytes())
    assert worker.not_valid_after_utc - datetime.datetime.now(datetime.UTC) > datetime.timedelta(days=certs.RENEW_BEFORE_DAYS)
    names = worker.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["localhost"]
    assert [str(address) for address in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1", "::1"]


def test_the_embedded_redis_asks_for_its_password_which_no_command_line_shows() -> None:
    password = "pw-" + uuid.uuid4().hex
    with EmbeddedRedis(EmbeddedRedisConfig(port=free_port(), maxmemory_mb=16, password=password)) as server:
        assert password not in server.display_url and password in server.url
        assert server.pid is not None
        assert password.encode() not in Path(f"/proc/{server.pid}/cmdline").read_bytes()
        with redis.Redis(port=server.config.port, socket_timeout=5) as anonymous, pytest.raises(redis.AuthenticationError):
            anonymous.ping()
        with redis.Redis.from_url(server.url, socket_timeout=5) as client:
            assert client.ping()
    with pytest.raises(ValueError, match="only letters, digits"):
        EmbeddedRedisConfig(password='quote"me')


def test_the_mesh_keeps_only_sealed_values_in_redis_and_never_logs_its_password(mesh: Mesh) -> None:
    assert mesh.secrets is not None and mesh.redis is not None
    synthesize(mesh.gateway_address, f"Sealed before it is stored, take {uuid.uuid4().int % 100000}.")
    with redis.Redis.from_url(mesh.redis.url, socket_timeout=5) as client:
        keys = client.keys("tts:*")
        assert keys
        # Every value is sealed, but the promotion counters, which hold only how often a sentence
        # (named by a digest) was asked for, and the idempotency records of long-form jobs (another
        # test's, on this shared mesh), which hold a job id and a digest keyed like the seals.
        counters = [key for key in keys if key.startswith(b"tts:hot:count:")]
        assert all(int(value) >= 1 for value in client.mget(counters) if value is not None)
        records = [key for key in keys if key.startswith(b"tts:jobs:idem:")]
        held = [value for value in client.mget(records) if value is not None] if records else []
        assert all(re.fullmatch(rb"[0-9a-f]{32} local-\d+:[0-9a-f]{64}", value) for value in held), held
        plain = [key for key in keys if key not in counters and key not in records and client.type(key) == b"string"]
        unsealed = [key for key, value in zip(plain, client.mget(plain) if plain else [], strict=True) if value is not None and value[:4] != b"TSEA"]
        assert not unsealed, unsealed
    password = mesh.secrets.redis_password
    for service in mesh.services.values():
        assert password not in service.log_path.read_text(errors="replace"), service.name
        assert password.encode() not in Path(f"/proc/{service.process.pid}/cmdline").read_bytes()
    gateway_log = mesh.services["gateway"].log_path.read_text(errors="replace")
    assert f"mel cache on Redis at redis://127.0.0.1:{mesh.redis.config.port}/0, values sealed with key local-1" in gateway_log
