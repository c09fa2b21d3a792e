"""The container engine's command line (podman, or docker with its daemon), as the mesh needs it.

Each method is one engine command; failures raise `EngineError` with the engine's own message.
Everything a container runs with is given at `run`; `start` brings a stopped or killed container
back with the same name, ports, network aliases and settings, as a restarted pod keeps its spec.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

ENGINES: Final = ("podman", "docker")


class EngineError(RuntimeError):
    """An engine command failed; the message carries what it printed."""


@dataclass(frozen=True)
class Mount:
    """A file or folder of this machine, read-only inside a container."""

    source: Path
    target: str


@dataclass(frozen=True)
class ContainerSpec:
    """One container, with the security context the Kubernetes manifests give its pod."""

    name: str
    image: str
    args: Sequence[str]
    """Arguments after the image's entrypoint (the manifest's `args`)."""
    network: str
    aliases: Sequence[str] = ()
    """Names other containers on `network` reach it by (a Service's name)."""
    env: Mapping[str, str] = field(default_factory=dict)
    ports: Mapping[int, int] = field(default_factory=dict)
    """Container port -> port on 127.0.0.1 of this machine."""
    user: str = "10001:10001"
    entrypoint: str = ""
    """Replaces the image's entrypoint (empty: the image's)."""
    workdir: str = ""
    """Replaces the image's working folder (empty: the image's)."""
    tmpfs: Sequence[str] = ("/tmp",)
    """Writable in-memory folders (the manifests' emptyDir volumes); the rest of the root is read-only."""
    mounts: Sequence[Mount] = ()
    memory_limit: str = ""
    """`--memory` (the manifest's memory limit, e.g. 4g); empty: none."""
    stop_grace_s: int = 10
    """What SIGTERM gets before SIGKILL on `stop` (the pod's terminationGracePeriodSeconds)."""


class Engine:
    """podman or docker, by name."""

    def __init__(self, name: str = "") -> None:
        self.name = name or detect()

    def run(self, spec: ContainerSpec) -> None:
        """Create and start `spec` in the background."""
        command = [
            self.name, "run", "--detach", "--name", spec.name, "--network", spec.network,
            "--read-only", "--user", spec.user, "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
            "--stop-timeout", str(spec.stop_grace_s),
        ]  # fmt: skip
        if self.name == "podman":
            command.append("--read-only-tmpfs=false")  # only the folders the manifests mount are writable
        for alias in spec.aliases:
            command += ["--network-alias", alias]
        for path in spec.tmpfs:
            command += ["--tmpfs", f"{path}:rw,nosuid,nodev,mode=1777"]
        for mount in spec.mounts:
            command += ["--volume", f"{mount.source}:{mount.target}:ro"]
        for container_port, host_port in spec.ports.items():
            command += ["--publish", f"127.0.0.1:{host_port}:{container_port}"]
        for key, value in spec.env.items():
            command += ["--env", f"{key}={value}"]
        if spec.memory_limit:
            command += ["--memory", spec.memory_limit]
        if spec.entrypoint:
            command += ["--entrypoint", spec.entrypoint]
        if spec.workdir:
            command += ["--workdir", spec.workdir]
        self._run([*command, spec.image, *spec.args])

    def start(self, name: str) -> None:
        """Start a stopped container again, as it was created."""
        self._run([self.name, "start", name])

    def kill(self, name: str, signal: str = "KILL") -> None:
        self._run([self.name, "kill", "--signal", signal, name])

    def stop(self, name: str, timeout_s: int) -> None:
        """SIGTERM, then SIGKILL after `timeout_s`; returns once the container has exited."""
        self._run([self.name, "stop", "--time", str(timeout_s), name], timeout_s=timeout_s + 60)

    def wait(self, name: str, timeout_s: float = 60.0) -> int:
        """Wait for the container to exit; its exit code."""
        return int(self._run([self.name, "wait", name], timeout_s=timeout_s).strip().splitlines()[-1])

    def remove(self, name: str) -> None:
        """Remove a container, running or not (no error when it is not there)."""
        subprocess.run([self.name, "rm", "--force", "--time", "0", name] if self.name == "podman" else [self.name, "rm", "--force", name],
                       capture_output=True, timeout=120)  # fmt: skip

    def state(self, name: str) -> dict[str, object]:
        """The container's State (Status, Running, Pid, ExitCode, ...)."""
        return json.loads(self._run([self.name, "inspect", "--format", "{{json .State}}", name]))

    def running(self, name: str) -> bool:
        try:
            return bool(self.state(name).get("Running"))
        except EngineError:
            return False

    def pid(self, name: str) -> int:
        """The container's first process as this machine numbers it (0 when it is not running)."""
        return int(self.state(name).get("Pid") or 0)

    def logs(self, name: str, tail: int = 60) -> str:
        done = subprocess.run([self.name, "logs", "--tail", str(tail), name], capture_output=True, text=True, timeout=60)
        return done.stdout + done.stderr

    def image_exists(self, image: str) -> bool:
        return subprocess.run([self.name, "image", "inspect", image], capture_output=True, timeout=60).returncode == 0

    def image_size_bytes(self, image: str) -> int:
        return int(self._run([self.name, "image", "inspect", "--format", "{{.Size}}", image]).strip())

    def create_network(self, name: str) -> None:
        self._run([self.name, "network", "create", name])

    def remove_network(self, name: str) -> None:
        subprocess.run([self.name, "network", "rm", "--force", name], capture_output=True, timeout=120)

    def _run(self, command: list[str], timeout_s: float = 120.0) -> str:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
        if done.returncode != 0:
            raise EngineError(f"{' '.join(command[:3])} ...: {done.stderr.strip() or done.stdout.strip()}")
        return done.stdout


def detect() -> str:
    """podman when installed, else docker when its daemon answers; EngineError when neither."""
    if shutil.which("podman"):
        return "podman"
    if shutil.which("docker") and subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0:
        return "docker"
    raise EngineError("no container engine: install podman (`make container-engine`) or start Docker")


def available() -> bool:
    """Whether a container engine can be used here."""
    try:
        detect()
    except (EngineError, OSError, subprocess.TimeoutExpired):
        return False
    return True
