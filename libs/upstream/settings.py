"""Which workers a gateway talks to and how its connections to them behave.

`channel_options` is the only place that turns these settings into gRPC channel arguments, and
`channel_credentials` into the channels' TLS credentials.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Final

import grpc

from libs.routing.discovery import DEFAULT_DISCOVERY_INTERVAL_S, DISCOVERY_MODES
from libs.routing.endpoints import Endpoint, parse_endpoint
from libs.routing.picker import PICK_STRATEGIES
from libs.serving import tls
from libs.serving.server import CHANNEL_OPTIONS, DEFAULT_PORTS, DEFAULT_ZONE, MIN_PING_INTERVAL_MS
from libs.serving.tls import PemFile
from libs.settings.fields import setting

# A worker that owes an answer sends one, or a busy message every second while the step waits in its
# queue and its other steps progress: five seconds of silence means it is hung or gone, and still
# leaves room for two more attempts inside a typical 30 s client deadline.
DEFAULT_ATTEMPT_TIMEOUT_S: Final = 5.0
# Keepalive at 20 s stays well above the servers' minimum ping interval (MIN_PING_INTERVAL_MS, the
# setting's minimum; faster pings earn a GOAWAY) and, with a 5 s ack timeout, drops a dead
# connection that sends no RST in under 30 s.
DEFAULT_KEEPALIVE_TIME_MS: Final = 20_000
DEFAULT_KEEPALIVE_TIMEOUT_MS: Final = 5_000
# gRPC's default reconnect backoff grows to 120 s: a worker restarted after a crash loop would sit
# idle for minutes. Capping it at 2 s costs a loopback/cluster dial every 2 s per dead endpoint.
DEFAULT_RECONNECT_INITIAL_MS: Final = 250
DEFAULT_RECONNECT_MAX_MS: Final = 2_000
DEFAULT_CONNECT_TIMEOUT_MS: Final = 2_000

_ENDPOINT_FORMAT: Final = "ZONE=HOST:PORT; repeatable, the variable comma-separated"


def _spec(endpoint: Endpoint) -> str:
    return endpoint.spec


@dataclass(frozen=True)
class UpstreamSettings:
    """The gateway's workers and its connections to them."""

    acoustic: tuple[Endpoint, ...] = setting(
        (parse_endpoint(f"{DEFAULT_ZONE}=127.0.0.1:{DEFAULT_PORTS['acoustic']}", "acoustic"),),
        env="TTS_ACOUSTIC", doc=f"an acoustic worker ({_ENDPOINT_FORMAT})", parse=partial(parse_endpoint, kind="acoustic"),
        repeatable=True, show=_spec,
    )  # fmt: skip
    vocoder: tuple[Endpoint, ...] = setting(
        (parse_endpoint(f"{DEFAULT_ZONE}=127.0.0.1:{DEFAULT_PORTS['vocoder']}", "vocoder"),),
        env="TTS_VOCODER", doc=f"a vocoder worker ({_ENDPOINT_FORMAT})", parse=partial(parse_endpoint, kind="vocoder"),
        repeatable=True, show=_spec,
    )  # fmt: skip
    discovery: str = setting(
        "dns", env="TTS_DISCOVERY", choices=DISCOVERY_MODES,
        doc="how each worker NAME becomes pods: dns (re-resolve it, every address is a worker) or kubernetes "
        "(watch the EndpointSlices of the Service NAME, with each pod's zone and ready/terminating state)",
    )  # fmt: skip
    discovery_interval_s: float = setting(
        DEFAULT_DISCOVERY_INTERVAL_S, env="TTS_DISCOVERY_INTERVAL_S", unit="s", minimum=0.05,
        doc="how often each worker name is resolved again (dns discovery)",
    )  # fmt: skip
    discovery_namespace: str = setting(
        "", env="TTS_DISCOVERY_NAMESPACE",
        doc="namespace of the worker Services (kubernetes discovery; empty: the gateway's own)",
    )  # fmt: skip
    pick_strategy: str = setting(
        "least_outstanding", env="TTS_PICK_STRATEGY", choices=PICK_STRATEGIES,
        doc="how a stream's worker is chosen within a zone: least_outstanding (fewest streams from this gateway) or power_of_two",
    )  # fmt: skip
    attempt_timeout_s: float = setting(
        DEFAULT_ATTEMPT_TIMEOUT_S, env="TTS_ATTEMPT_TIMEOUT_S", unit="s", minimum=0.001,
        doc="longest silence from a worker that owes an answer before the attempt is abandoned",
    )  # fmt: skip
    keepalive_time_ms: int = setting(
        DEFAULT_KEEPALIVE_TIME_MS, env="TTS_KEEPALIVE_TIME_MS", unit="ms", minimum=MIN_PING_INTERVAL_MS,
        doc="interval of HTTP/2 keepalive pings on worker connections (10 s at least: workers answer faster pings with GOAWAY)",
    )  # fmt: skip
    keepalive_timeout_ms: int = setting(
        DEFAULT_KEEPALIVE_TIMEOUT_MS, env="TTS_KEEPALIVE_TIMEOUT_MS", unit="ms", minimum=1,
        doc="time a keepalive ping may go unanswered before the connection is dropped",
    )  # fmt: skip
    reconnect_initial_ms: int = setting(
        DEFAULT_RECONNECT_INITIAL_MS, env="TTS_RECONNECT_INITIAL_MS", unit="ms", minimum=1,
        doc="first reconnect backoff after a worker connection fails",
    )  # fmt: skip
    reconnect_max_ms: int = setting(
        DEFAULT_RECONNECT_MAX_MS, env="TTS_RECONNECT_MAX_MS", unit="ms", minimum=1,
        doc="cap on the reconnect backoff, so a restarted worker is dialled again within this",
    )  # fmt: skip
    connect_timeout_ms: int = setting(
        DEFAULT_CONNECT_TIMEOUT_MS, env="TTS_CONNECT_TIMEOUT_MS", unit="ms", minimum=1,
        doc="shortest time one connection attempt may take before it is abandoned",
    )  # fmt: skip
    tls_ca: str = setting(
        "", env="TTS_UPSTREAM_CA", flag="--upstream-ca",
        doc="PEM CA the workers' certificates must come from; set, worker connections use TLS (empty: plaintext)",
    )  # fmt: skip
    tls_cert: str = setting(
        "", env="TTS_UPSTREAM_CERT", flag="--upstream-cert", doc="PEM client certificate the gateway shows its workers (mutual TLS)"
    )
    tls_key: str = setting("", env="TTS_UPSTREAM_KEY", flag="--upstream-key", doc="PEM private key of --upstream-cert")
    tls_server_name: str = setting(
        "", env="TTS_UPSTREAM_SERVER_NAME", flag="--upstream-server-name",
        doc="name every worker certificate is checked against instead of the endpoint's host (empty: the host)",
    )  # fmt: skip

    def __post_init__(self) -> None:
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("--upstream-cert and --upstream-key go together: give both or neither")
        if (self.tls_cert or self.tls_server_name) and not self.tls_ca:
            raise ValueError("--upstream-cert and --upstream-server-name need --upstream-ca: the workers are verified against it")
        for kind, endpoints in (("acoustic", self.acoustic), ("vocoder", self.vocoder)):
            if not endpoints:
                raise ValueError(f"the gateway needs at least one --{kind} endpoint")
            addresses = [endpoint.address for endpoint in endpoints]
            if len(set(addresses)) != len(addresses):
                raise ValueError(f"a --{kind} address is listed twice ({', '.join(addresses)}); list each worker once")


def check_local_zone(settings: UpstreamSettings, zone: str) -> None:
    """Refuse a gateway whose zone is none of its workers' zones when those span several zones.

    In a multi-zone deployment an unknown zone means the zone never reached the gateway (on
    Kubernetes: the node's topology label was not copied onto the pod), and the gateway would treat
    every worker as remote.
    """
    zones = sorted({endpoint.zone for endpoint in (*settings.acoustic, *settings.vocoder)})
    if len(zones) > 1 and zone not in zones:
        raise ValueError(
            f"this gateway's zone {zone!r} is none of its workers' zones ({', '.join(zones)}): set --zone (TTS_ZONE) to "
            "the zone it runs in; on Kubernetes the pod must carry the label topology.kubernetes.io/zone "
            "(k8s/README.md, \"The pod's zone\")"
        )


def channel_options(settings: UpstreamSettings) -> list[tuple[str, int | str]]:
    """gRPC arguments of the gateway's worker channels: message sizes, keepalive, fast reconnects."""
    options = dict(CHANNEL_OPTIONS)
    options.update(
        {
            "grpc.keepalive_time_ms": settings.keepalive_time_ms,
            "grpc.keepalive_timeout_ms": settings.keepalive_timeout_ms,
            # Health Watch streams carry no data for long stretches; keep pinging through them.
            "grpc.http2.max_pings_without_data": 0,
            "grpc.initial_reconnect_backoff_ms": settings.reconnect_initial_ms,
            "grpc.min_reconnect_backoff_ms": settings.connect_timeout_ms,
            "grpc.max_reconnect_backoff_ms": settings.reconnect_max_ms,
            # Retries happen once, in the gateway's own loop; gRPC's would stack on top of them.
            "grpc.enable_retries": 0,
        }
    )
    if settings.tls_server_name:
        options["grpc.ssl_target_name_override"] = settings.tls_server_name
    return list(options.items())


def channel_credentials(settings: UpstreamSettings) -> grpc.ChannelCredentials | None:
    """TLS credentials of the worker channels (mutual with a client certificate), or None for plaintext.

    A worker's certificate must name the host of its endpoint (an IP address SAN for 127.0.0.1, a
    DNS SAN for a Kubernetes Service name) or `--upstream-server-name`.
    """
    if not settings.tls_ca:
        return None
    ca = PemFile(settings.tls_ca, "--upstream-ca")
    if not settings.tls_cert:
        return tls.channel_credentials(ca)
    return tls.channel_credentials(ca, PemFile(settings.tls_cert, "--upstream-cert"), PemFile(settings.tls_key, "--upstream-key"))
