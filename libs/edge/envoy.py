"""The edge: one Envoy in front of the gateway, configured from one place for `make run` and Kubernetes.

Browsers, mobile apps and HTTP tools all reach the service on one port:
- gRPC (HTTP/2) passes straight through to the gateway's gRPC port;
- grpc-web (HTTP/1.1 or 2, binary or text) is translated by Envoy's `grpc_web` filter, so a browser
  can call `Synthesize` (server streaming), `ListVoices` and every method of `LongFormSynthesis`;
  `StreamingSynthesize` stays gRPC-only, as browsers cannot open a client stream;
- `/v1/...` (the OpenAI-compatible API, long-form jobs under `/v1/audio/jobs` included, and the
  WebSocket doors, upgraded here) and `/` (the web page) go to the gateway's HTTP port.
CORS answers the configured origins; TLS is terminated here when a certificate is given; access
logs go to standard output; the admin interface listens on localhost only. It is set up as an edge
that faces the internet: clients have `request_headers_timeout_s` to send their headers, at most
`max_connections` are held at once, buffers and HTTP/2 streams per connection are bounded, and
header names with "_" are refused.

`envoy_config(settings)` is the whole bootstrap as a dict; `python -m libs.edge.envoy --target k8s`
writes the Kubernetes renderings (k8s/base/edge/envoy.yaml; the prod overlay's, with TLS on both
sides, in k8s/overlays/prod/edge/envoy.yaml), which a test keeps in step.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

DEFAULT_EDGE_PORT: Final = 8080
DEFAULT_ADMIN_PORT: Final = 9901
GRPC_SERVICE_PREFIX: Final = "/tts.v1.TextToSpeech/"
LONG_FORM_SERVICE_PREFIX: Final = "/tts.v1.LongFormSynthesis/"
GRPC_SERVICE_PREFIXES: Final = (GRPC_SERVICE_PREFIX, LONG_FORM_SERVICE_PREFIX)
"""Every public gRPC service the gateway serves (protos/tts/v1/tts.proto, jobs.proto): routed to its gRPC port."""
HEALTH_PATH: Final = "/healthz"
"""Answered by the edge itself, for load balancers and Kubernetes probes."""
STREAM_IDLE_TIMEOUT_S: Final = 300
REQUEST_HEADERS_TIMEOUT_S: Final = 10.0
"""A client that has not sent a request's headers in this time is closed: connections that trickle
a header a minute (slowloris) would otherwise be held for ever."""
MAX_DOWNSTREAM_CONNECTIONS: Final = 10_000
BUFFER_LIMIT_BYTES: Final = 32 * 1024
"""What the edge buffers per connection, each way, before it stops reading (flow control, not a refusal)."""
HTTP2_MAX_CONCURRENT_STREAMS: Final = 100
"""A speech stream may go quiet while a long sentence is synthesised; five minutes bounds a dead one."""
K8S_DIR: Final = Path(__file__).resolve().parents[2] / "k8s"
K8S_RENDERING: Final = K8S_DIR / "base" / "edge" / "envoy.yaml"
K8S_PROD_RENDERING: Final = K8S_DIR / "overlays" / "prod" / "edge" / "envoy.yaml"


@dataclass(frozen=True)
class EdgeSettings:
    """Where the edge listens and what it forwards to."""

    port: int = DEFAULT_EDGE_PORT
    """The one public port (gRPC, grpc-web, HTTP)."""
    admin_port: int = DEFAULT_ADMIN_PORT
    """Envoy's admin interface, on 127.0.0.1 only."""
    gateway_host: str = "127.0.0.1"
    """The gateway's address (a name Envoy resolves, or an IP)."""
    gateway_grpc_port: int = 50051
    gateway_http_port: int = 8000
    cors_origins: tuple[str, ...] = ("http://localhost:8080", "http://127.0.0.1:8080")
    """Origins whose pages may call the edge from a browser (exact matches)."""
    tls_cert: str = ""
    """PEM certificate chain to terminate TLS with (empty: plaintext)."""
    tls_key: str = ""
    access_log: bool = True
    resolve_by_dns: bool = False
    """Whether `gateway_host` is a DNS name to re-resolve (Kubernetes) rather than a fixed address."""
    upstream_tls_ca: str = ""
    """PEM CA that the gateway's gRPC certificate must come from (empty: plaintext to the gateway)."""
    request_headers_timeout_s: float = REQUEST_HEADERS_TIMEOUT_S
    """How long a client may take to send a request's headers before the edge closes its connection."""
    max_connections: int = MAX_DOWNSTREAM_CONNECTIONS
    """Client connections the edge holds at once; past it, new ones are closed as they arrive."""


def edge_settings_for_k8s(prod: bool = False) -> EdgeSettings:
    """The edge as Kubernetes runs it: the gateway Service by name. In the prod overlay it terminates
    the public TLS (the Secret tts-edge-public-tls) and dials the gateway over TLS, trusting the mesh
    CA that issued the gateway's certificate (k8s/overlays/prod/certificates.yaml)."""
    if not prod:
        return EdgeSettings(gateway_host="gateway", cors_origins=("https://tts.example.com",), resolve_by_dns=True)
    return EdgeSettings(
        gateway_host="gateway",
        cors_origins=("https://tts.example.com",),
        resolve_by_dns=True,
        tls_cert="/etc/edge/public-tls/tls.crt",
        tls_key="/etc/edge/public-tls/tls.key",
        upstream_tls_ca="/etc/edge/mesh-ca/ca.crt",
    )


def envoy_config(settings: EdgeSettings) -> dict[str, Any]:
    """The Envoy bootstrap for `settings`."""
    return {
        "admin": {"address": _address("127.0.0.1", settings.admin_port)},
        "overload_manager": {
            "resource_monitors": [
                {
                    "name": "envoy.resource_monitors.global_downstream_max_connections",
                    "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.resource_monitors.downstream_connections.v3.DownstreamConnectionsConfig",
                        "max_active_downstream_connections": settings.max_connections,
                    },
                }
            ]
        },
        "static_resources": {
            "listeners": [_listener(settings)],
            "clusters": [
                _cluster("gateway_grpc", settings, settings.gateway_grpc_port, http2=True),
                _cluster("gateway_http", settings, settings.gateway_http_port, http2=False),
            ],
        },
    }


def _listener(settings: EdgeSettings) -> dict[str, Any]:
    manager: dict[str, Any] = {
        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": "edge",
        "codec_type": "AUTO",  # HTTP/1.1 for browsers and curl, HTTP/2 (h2c or TLS) for gRPC
        # The edge is the outermost proxy: it appends its caller's address to x-forwarded-for, which
        # the gateway reads for per-client limits when the edge is in --trusted-proxies.
        "use_remote_address": True,
        "stream_idle_timeout": f"{STREAM_IDLE_TIMEOUT_S}s",
        # Hardened as an edge faces the internet: a deadline for the headers, names with "_" refused
        # (a gateway could read "x_api_key" as "x-api-key"), and HTTP/2 streams and windows bounded.
        "request_headers_timeout": f"{settings.request_headers_timeout_s:g}s",
        "common_http_protocol_options": {"headers_with_underscores_action": "REJECT_REQUEST"},
        "http2_protocol_options": {
            "max_concurrent_streams": HTTP2_MAX_CONCURRENT_STREAMS,
            "initial_stream_window_size": 64 * 1024,
            "initial_connection_window_size": 1024 * 1024,
        },
        "route_config": {"name": "edge", "virtual_hosts": [_virtual_host(settings)]},
        "http_filters": [
            {
                "name": "envoy.filters.http.grpc_web",
                "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.grpc_web.v3.GrpcWeb"},
            },
            {
                "name": "envoy.filters.http.cors",
                "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.cors.v3.Cors"},
            },
            {
                "name": "envoy.filters.http.router",
                "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
            },
        ],
    }
    if settings.access_log:
        manager["access_log"] = [
            {
                "name": "envoy.access_loggers.stdout",
                "typed_config": {"@type": "type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog"},
            }
        ]
    chain: dict[str, Any] = {"filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": manager}]}
    if settings.tls_cert:
        chain["transport_socket"] = {
            "name": "envoy.transport_sockets.tls",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
                "common_tls_context": {
                    "alpn_protocols": ["h2", "http/1.1"],
                    "tls_certificates": [
                        {"certificate_chain": {"filename": settings.tls_cert}, "private_key": {"filename": settings.tls_key}}
                    ],
                },
            },
        }
    return {
        "name": "edge",
        "address": _address("0.0.0.0", settings.port),
        "per_connection_buffer_limit_bytes": BUFFER_LIMIT_BYTES,
        "filter_chains": [chain],
    }


def _virtual_host(settings: EdgeSettings) -> dict[str, Any]:
    # One policy for every route: grpc-web calls of both services, and the HTTP API, whose job routes
    # also take DELETE (remove a job) and an Idempotency-Key, and answer a create with its Location.
    cors = {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.cors.v3.CorsPolicy",
        "allow_origin_string_match": [{"exact": origin} for origin in settings.cors_origins],
        "allow_methods": "GET, POST, DELETE, OPTIONS",
        "allow_headers": "content-type, x-grpc-web, x-user-agent, grpc-timeout, authorization, connect-protocol-version, idempotency-key",
        "expose_headers": "grpc-status, grpc-message, grpc-status-details-bin, location",
        "max_age": "600",
    }
    # Streams last as long as their audio: no route timeout, the client's deadline governs.
    grpc_route = {"cluster": "gateway_grpc", "timeout": "0s", "max_stream_duration": {"grpc_timeout_header_max": "0s"}}
    return {
        "name": "tts",
        "domains": ["*"],
        "typed_per_filter_config": {"envoy.filters.http.cors": cors},
        "routes": [
            # Envoy itself answers probes (the admin port listens on localhost, out of a prober's reach).
            {"match": {"path": HEALTH_PATH}, "direct_response": {"status": 200, "body": {"inline_string": "ok\n"}}},
            *({"match": {"prefix": prefix}, "route": grpc_route} for prefix in GRPC_SERVICE_PREFIXES),
            # The HTTP port's WebSockets (ours and ElevenLabs' dialect) are upgraded here and pass through.
            {"match": {"prefix": "/"}, "route": {"cluster": "gateway_http", "timeout": "0s", "upgrade_configs": [{"upgrade_type": "websocket"}]}},
        ],
    }


def _cluster(name: str, settings: EdgeSettings, port: int, http2: bool) -> dict[str, Any]:
    cluster: dict[str, Any] = {
        "name": name,
        "connect_timeout": "2s",
        "per_connection_buffer_limit_bytes": BUFFER_LIMIT_BYTES,
        "type": "STRICT_DNS" if settings.resolve_by_dns else "STATIC",
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": _address(settings.gateway_host, port)}}]}],
        },
    }
    if http2:
        cluster["typed_extension_protocol_options"] = {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                "explicit_http_config": {"http2_protocol_options": {}},
            }
        }
    if settings.upstream_tls_ca:  # the gateway's gRPC and HTTP ports both speak TLS then
        cluster["transport_socket"] = {
            "name": "envoy.transport_sockets.tls",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
                "sni": settings.gateway_host,
                "common_tls_context": {
                    "alpn_protocols": ["h2"] if http2 else ["http/1.1"],
                    "validation_context": {"trusted_ca": {"filename": settings.upstream_tls_ca}},
                },
            },
        }
    return cluster


def _address(host: str, port: int) -> dict[str, Any]:
    return {"socket_address": {"address": host, "port_value": port}}


def render_yaml(settings: EdgeSettings) -> str:
    """The bootstrap as YAML, with a header that says where it comes from."""
    header = "# Generated by `python -m libs.edge.envoy --target k8s` from libs/edge/envoy.py: edit that, not this.\n"
    return header + yaml.safe_dump(json.loads(json.dumps(envoy_config(settings))), sort_keys=False)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Render the edge's Envoy configuration.")
    parser.add_argument("--target", choices=["k8s", "stdout"], default="stdout")
    parser.add_argument("--check", action="store_true", help="with --target k8s: only say whether the file is up to date")
    args = parser.parse_args(argv)
    if args.target == "stdout":
        sys.stdout.write(render_yaml(EdgeSettings()))
        return 0
    stale = 0
    for path, prod in ((K8S_RENDERING, False), (K8S_PROD_RENDERING, True)):
        rendered = render_yaml(edge_settings_for_k8s(prod))
        if args.check:
            current = path.read_text(encoding="utf-8") if path.exists() else ""
            print("up to date" if current == rendered else f"{path} is stale: run python -m libs.edge.envoy --target k8s")
            stale += current != rendered
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rendered, encoding="utf-8")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
