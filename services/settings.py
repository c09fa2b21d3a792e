"""Every setting of every service, by service: the one table the flags, the table of docs/settings.md
and the Kubernetes checks are all made from.

Each setting is declared once, next to the code it steers (`libs.settings.fields.setting`); a
service's settings are the groups it is made of. `python -m services.settings` prints the table
that `make docs` writes into docs/settings.md.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from libs.cache.settings import CacheSettings
from libs.jobs.settings import JobSettings
from libs.prewarm.settings import PrewarmSettings
from libs.routing.health import HealthConfig
from libs.routing.retry import RetryBudgetConfig, RetryConfig
from libs.serving.admission import AdmissionSettings
from libs.serving.auth import AuthSettings
from libs.serving.clients import ClientSettings
from libs.serving.http import HttpSettings, SocketSettings
from libs.serving.server import ServerSettings
from libs.serving.voice_shelf import VoiceFolderSettings, VoiceShelfSettings
from libs.serving.worker import WorkerSettings
from libs.serving.wyoming import WyomingSettings
from libs.settings.fields import load, render_value, settings_of
from libs.synthesis.options import RequestLimits
from libs.synthesis.text_side import TextLimits
from libs.upstream.settings import UpstreamSettings, check_local_zone

SERVICES: Final = ("gateway", "acoustic", "vocoder")


@dataclass(frozen=True)
class GatewaySettings:
    """The gateway: its server, its workers, how it routes and retries, its cache, its limits and who may call it."""

    server: ServerSettings
    upstream: UpstreamSettings
    retry: RetryConfig
    retry_budget: RetryBudgetConfig
    ejection: HealthConfig
    cache: CacheSettings
    limits: RequestLimits
    text: TextLimits
    auth: AuthSettings
    clients: ClientSettings
    http: HttpSettings
    socket: SocketSettings
    wyoming: WyomingSettings
    jobs: JobSettings
    prewarm: PrewarmSettings
    voices: VoiceFolderSettings

    def __post_init__(self) -> None:
        check_local_zone(self.upstream, self.server.zone)
        needed = 4 * self.limits.max_text_chars + 1024  # UTF-8 takes up to 4 bytes a character, the other fields a few hundred
        if self.server.max_receive_message_bytes < needed:
            raise ValueError(
                f"--max-receive-message-bytes {self.server.max_receive_message_bytes} cannot carry a request of "
                f"--max-text-chars {self.limits.max_text_chars}; give it at least {needed}"
            )


@dataclass(frozen=True)
class WorkerServiceSettings:
    """An acoustic or vocoder worker: its server, how it runs its model, when it refuses streams, its voices."""

    server: ServerSettings
    worker: WorkerSettings
    admission: AdmissionSettings
    voices: VoiceFolderSettings
    shelf: VoiceShelfSettings


SERVICE_SETTINGS: Final[Mapping[str, type]] = {
    "gateway": GatewaySettings,
    "acoustic": WorkerServiceSettings,
    "vocoder": WorkerServiceSettings,
}


def load_gateway_settings(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> GatewaySettings:
    """The gateway's settings from its flags, then the environment, then the defaults."""
    return load(GatewaySettings, "gateway", argv, environ)


def load_worker_settings(
    service: str, argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> WorkerServiceSettings:
    """An acoustic or vocoder worker's settings from its flags, then the environment, then the defaults."""
    if service not in ("acoustic", "vocoder"):
        raise ValueError(f"{service!r} is not a worker; expected acoustic or vocoder")
    return load(WorkerServiceSettings, service, argv, environ)


def known_env(service: str) -> set[str]:
    """Every environment variable `service` reads for its settings."""
    return {item.spec.env for item in settings_of(SERVICE_SETTINGS[service], service)}


def markdown_table() -> str:
    """The table of every flag (docs/settings.md): one row per flag, its variable, default, unit, services and meaning."""
    rows: dict[tuple[str, str], dict[str, object]] = {}
    for service in SERVICES:
        for item in settings_of(SERVICE_SETTINGS[service], service):
            row = rows.setdefault((item.spec.flag, item.spec.env), {"spec": item.spec, "defaults": {}})
            row["defaults"][service] = render_value(item.default, item.spec.show)  # type: ignore[index]
    lines = ["| flag | env | default | unit | services | what it sets |", "|---|---|---|---|---|---|"]
    for (flag, env), row in rows.items():
        spec = row["spec"]
        defaults: dict[str, str] = row["defaults"]  # type: ignore[assignment]
        if len(set(defaults.values())) == 1:
            default = f"`{next(iter(defaults.values()))}`"
        else:
            default = ", ".join(f"{service} `{value}`" for service, value in defaults.items())
        services = "all" if len(defaults) == len(SERVICES) else ", ".join(defaults)
        choices = f" ({', '.join(spec.choices)})" if spec.choices else ""  # type: ignore[attr-defined]
        lines.append(f"| `{flag}` | `{env}` | {default} | {spec.unit} | {services} | {spec.doc}{choices} |")  # type: ignore[attr-defined]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print the table of every service's settings (markdown).")
    parser.parse_args(argv)
    sys.stdout.write(markdown_table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
