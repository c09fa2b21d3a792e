"""`make image`: build the Dockerfile's images with podman or docker, whichever is present.

    python3 -m scripts.containers.build_image [--target runtime|gpu ...] [--base-image auto|NAME]
                                              [--torch-index auto|URL|none] [--host-pip-config auto|yes|no]

The Dockerfile stays in its production form; what a machine needs to build it is passed in here:

- the base image (`--base-image`, the Dockerfile's PYTHON_IMAGE): `auto` takes the registry's
  python:3.11.11-slim-bookworm when the engine has it or can pull it, and otherwise builds and uses
  a local Debian base (scripts/containers/base_image.sh: debootstrap, Debian's python3.11);
- the CPU torch index (`--torch-index`, the Dockerfile's TORCH_INDEX_URL): `auto` keeps PyTorch's
  CPU index when it answers, and leaves it out otherwise (then pip's own configuration must offer
  the CPU wheel; the Dockerfile refuses a CPU image whose torch carries CUDA);
- the machine's pip configuration (`--host-pip-config`): with podman, `auto` mounts what
  `pip config list` shows (index, certificate bundle, constraints, local wheel folders) into the
  build's RUN steps, read-only, so pip inside the build behaves as it does on the machine. Nothing
  of it is copied into an image. For the GPU target local wheel folders are left out: a folder's
  CPU build of torch 2.13.0 (`2.13.0+cpu`) would satisfy `torch==2.13.0` ahead of the index's CUDA
  build. Docker's builder has no RUN-time mounts without changing the Dockerfile, so with docker
  the build uses the Dockerfile's own sources.

Only the standard library: it runs before any virtualenv exists.
"""

from __future__ import annotations

import argparse
import configparser
import io
import os
import shlex
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]
REGISTRY_BASE: Final = "python:3.11.11-slim-bookworm"
LOCAL_BASE: Final = "localhost/tts-python:3.11-bookworm"
TORCH_CPU_INDEX: Final = "https://download.pytorch.org/whl/cpu"
TAGS: Final = {"runtime": "tts-mesh:dev", "gpu": "tts-mesh-gpu:dev"}
PULL_TIMEOUT_S: Final = 600
PATH_OPTIONS: Final = ("cert", "client-cert", "constraint", "requirement", "find-links", "extra-index-url", "index-url")
"""pip options whose values can name files or folders on this machine (`file://` URLs included)."""


def engine() -> str:
    """podman, or docker when its daemon answers (scripts/containers/engine.sh decides)."""
    found = subprocess.run([str(ROOT / "scripts/containers/engine.sh")], capture_output=True, text=True)
    if found.returncode != 0:
        sys.exit(found.stderr.strip())
    return found.stdout.strip()


def has_image(engine_name: str, image: str) -> bool:
    return subprocess.run([engine_name, "image", "inspect", image], capture_output=True).returncode == 0


def choose_base(engine_name: str, wanted: str) -> str:
    """The base image to build from (see the module's docstring for `auto`)."""
    if wanted != "auto":
        return wanted
    if has_image(engine_name, REGISTRY_BASE):
        return REGISTRY_BASE
    pulled = subprocess.run([engine_name, "pull", f"docker.io/library/{REGISTRY_BASE}"], capture_output=True, timeout=PULL_TIMEOUT_S)
    if pulled.returncode == 0:
        return REGISTRY_BASE
    print(f"[image] {REGISTRY_BASE} cannot be pulled here; building on the local Debian base {LOCAL_BASE}", flush=True)
    subprocess.run([str(ROOT / "scripts/containers/base_image.sh")], check=True, cwd=ROOT, env=_env(ENGINE=engine_name, BASE_IMAGE=LOCAL_BASE))
    return LOCAL_BASE


def choose_torch_index(wanted: str) -> str:
    """The CPU torch index to pass, or "" for none."""
    if wanted == "none":
        return ""
    if wanted != "auto":
        return wanted
    try:
        with urllib.request.urlopen(f"{TORCH_CPU_INDEX}/torch/", timeout=10):
            return TORCH_CPU_INDEX
    except OSError:
        print(f"[image] {TORCH_CPU_INDEX} does not answer; torch's CPU wheel must come from pip's own configuration", flush=True)
        return ""


def host_pip_config(target: str) -> tuple[str, list[Path]]:
    """This machine's pip configuration as one pip.conf text, and the paths its values name."""
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    if listed.returncode != 0:
        return "", []
    options: dict[str, str] = {}
    for line in listed.stdout.splitlines():
        name, _, value = line.partition("=")
        option = name.split(".", 1)[-1]
        options[option] = value.strip().strip("'\"")  # later lines (user, environment) win, as in pip
    if target == "gpu":
        options.pop("find-links", None)
        options["extra-index-url"] = " ".join(url for url in options.get("extra-index-url", "").split() if not url.startswith("file:"))
    options = {name: value for name, value in options.items() if value}
    paths: list[Path] = []
    for option in PATH_OPTIONS:
        for value in options.get(option, "").split():
            path = Path(value.removeprefix("file://"))
            if path.is_absolute() and path.exists():
                # A file:// index names its simple/ folder; its links may point beside it (../../files).
                paths.append(path.parent if value.startswith("file://") else path)
    config = configparser.ConfigParser(interpolation=None)
    config["global"] = options
    text = io.StringIO()
    config.write(text)
    return text.getvalue(), sorted(set(paths))


def build(engine_name: str, target: str, base: str, torch_index: str, pip_mounts: bool) -> float:
    """Build one target; returns the seconds it took."""
    command = [engine_name, "build", "--target", target, "-t", TAGS[target],
               "--build-arg", f"PYTHON_IMAGE={base}", "--build-arg", f"TORCH_INDEX_URL={torch_index}"]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="tts-image-") as folder:
        if pip_mounts:
            text, paths = host_pip_config(target)
            if text:
                conf = Path(folder) / "pip.conf"
                conf.write_text(text, encoding="utf-8")
                conf.chmod(0o644)
                command += ["--volume", f"{conf}:/etc/pip.conf:ro"]
                command += [arg for path in paths for arg in ("--volume", f"{path}:{path}:ro")]
                print(f"[image] the build's pip uses this machine's configuration: {', '.join(map(str, paths)) or 'pip.conf only'}", flush=True)
        command.append(str(ROOT))
        print("[image] " + shlex.join(command), flush=True)
        started = time.monotonic()
        subprocess.run(command, check=True, cwd=ROOT)
        return time.monotonic() - started


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, **extra}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", action="append", choices=sorted(TAGS), help="what to build (repeatable; default runtime)")
    parser.add_argument("--base-image", default="auto", help="the base image (PYTHON_IMAGE), or auto")
    parser.add_argument("--torch-index", default="auto", help="PyTorch's CPU index URL, auto, or none")
    parser.add_argument("--host-pip-config", choices=["auto", "yes", "no"], default="auto", help="mount this machine's pip configuration")
    args = parser.parse_args(argv)
    engine_name = engine()
    base = choose_base(engine_name, args.base_image)
    torch_index = choose_torch_index(args.torch_index)
    pip_mounts = args.host_pip_config == "yes" or (args.host_pip_config == "auto" and engine_name == "podman")
    if pip_mounts and engine_name != "podman":
        sys.exit("--host-pip-config yes needs podman (docker's builder has no RUN-time volumes)")
    for target in args.target or ["runtime"]:
        seconds = build(engine_name, target, base, torch_index, pip_mounts)
        size = subprocess.run([engine_name, "image", "inspect", "--format", "{{.Size}}", TAGS[target]], capture_output=True, text=True)
        print(f"[image] {TAGS[target]} (target {target}, base {base}) built in {seconds:.0f} s, {int(size.stdout or 0) / 1e9:.2f} GB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
