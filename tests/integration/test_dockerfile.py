"""What can be checked of the container image without a Docker engine.

The Dockerfile must install from pyproject.toml (no second dependency list; the GPU image swaps
onnxruntime for its `gpu` extra), start the services by module name, expose the ports the services
listen on by default, run as a non-root user, and its build-time commands must name code that
exists.
"""

from __future__ import annotations

import ast
import importlib
import json
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from libs.serving.http import DEFAULT_HTTP_PORT
from libs.serving.server import DEFAULT_METRICS_PORTS, DEFAULT_PORTS
from services.settings import SERVICES, load_worker_settings

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
TORCH_INDEX_OPTION = '${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"}'


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with line continuations joined and comments dropped."""
    result: list[tuple[str, str]] = []
    pending = ""
    for line in DOCKERFILE.read_text().splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = pending + stripped
        pending = ""
        keyword, _, arguments = full.partition(" ")
        result.append((keyword.upper(), arguments.strip()))
    return result


def runs() -> list[str]:
    return [arguments for keyword, arguments in instructions() if keyword == "RUN"]


def pyproject_dependencies() -> list[str]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]


def test_dependencies_are_installed_from_the_list_in_pyproject(tmp_path: Path) -> None:
    steps = instructions()
    copy_index = next(i for i, (kw, args) in enumerate(steps) if kw == "COPY" and args.split()[0] == "pyproject.toml")
    install_index = next(i for i, (kw, args) in enumerate(steps) if kw == "RUN" and "pip install" in args)
    assert copy_index < install_index

    install = steps[install_index][1]
    extract, _, pip_part = install.partition("&&")
    assert "-r requirements.txt" in pip_part
    # No package is named on any pip command line: everything comes through requirements.txt.
    for run in runs():
        for command in re.findall(r"pip install ([^&;]*)", run):
            command = command.replace(TORCH_INDEX_OPTION, "")
            words = [w for w in shlex.split(command) if not w.startswith("-") and "://" not in w]
            assert words == ["requirements.txt"], f"pip installs packages not from pyproject: {command}"

    # Run the extraction step itself on the real pyproject and compare with what tomllib reads.
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    command = extract.strip().replace("python -c", shlex.quote(sys.executable) + " -c", 1)
    subprocess.run(["bash", "-c", command], cwd=tmp_path, check=True)
    assert (tmp_path / "requirements.txt").read_text().split() == pyproject_dependencies()


def test_torch_comes_from_the_cpu_wheel_index_at_the_pinned_version() -> None:
    assert "torch==2.13.0" in pyproject_dependencies()
    # The index is a build argument (left empty where it does not answer and pip's own configuration
    # offers the CPU wheel), whose default is PyTorch's CPU index, passed to the CPU image's install.
    assert ("ARG", "TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu") in instructions()
    install = next(run for run in runs() if "pip install" in run)
    assert TORCH_INDEX_OPTION in install
    # A CUDA build that got in anyway (a local wheel, another index) fails the build.
    assert "torch.version.cuda and" in install


def test_the_cpu_index_option_disappears_when_the_argument_is_empty() -> None:
    for value, expected in (("https://download.pytorch.org/whl/cpu", "--extra-index-url https://download.pytorch.org/whl/cpu"), ("", "")):
        shown = subprocess.run(["sh", "-c", f"echo {TORCH_INDEX_OPTION}"], env={"TORCH_INDEX_URL": value}, capture_output=True, text=True)
        assert shown.stdout.strip() == expected


def _exec_form(keyword: str) -> list[str]:
    values = [json.loads(args) for kw, args in instructions() if kw == keyword]
    assert len(values) == 1, f"expected one {keyword}"
    return values[0]


def test_entrypoint_starts_the_service_named_by_the_first_argument() -> None:
    assert _exec_form("ENTRYPOINT") == ["python", "-m"]
    assert _exec_form("CMD") == ["services.gateway"]
    for service in SERVICES:
        assert (ROOT / "services" / service / "__main__.py").is_file(), f"services.{service} is not runnable with -m"


@pytest.mark.parametrize("service", SERVICES)
def test_each_service_module_runs_and_accepts_its_flags(service: str) -> None:
    """`python -m services.<name> --help` is what the image's entrypoint runs, minus the model load."""
    result = subprocess.run(
        [sys.executable, "-m", f"services.{service}", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "--port" in result.stdout and "--metrics-port" in result.stdout


def test_exposed_ports_are_the_services_default_ports() -> None:
    exposed = {int(port) for kw, args in instructions() if kw == "EXPOSE" for port in args.split()}
    grpc_and_metrics = {DEFAULT_PORTS[service] for service in SERVICES} | {DEFAULT_METRICS_PORTS[service] for service in SERVICES}
    assert exposed == grpc_and_metrics | {DEFAULT_HTTP_PORT}


def test_image_runs_as_a_numeric_non_root_user() -> None:
    users = [args for kw, args in instructions() if kw == "USER"]
    assert users, "no USER instruction: the image would run as root"
    uid, _, gid = users[-1].partition(":")
    assert int(uid) > 0 and (not gid or int(gid) > 0)


def test_build_time_python_commands_name_code_that_exists() -> None:
    """The voice-cache warm-up runs at build time; a renamed function would only fail in the build."""
    snippets = [m for run in runs() for m in re.findall(r'python -c "([^"]*)"', run)]
    checked = 0
    for snippet in snippets:
        for node in ast.walk(ast.parse(snippet)):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ("libs", "services"):
                module = importlib.import_module(node.module)
                for alias in node.names:
                    assert hasattr(module, alias.name), f"{node.module} has no {alias.name}"
                    checked += 1
    assert checked >= 1


def test_dockerignore_keeps_the_runtime_tree_and_drops_local_state() -> None:
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines() if line.strip() and not line.startswith("#")}
    assert {".git", ".venv", "tests"} <= ignored
    assert not ignored & {"libs", "services", "assets", "protos", "pyproject.toml"}


def _stages() -> dict[str, list[tuple[str, str]]]:
    """Each named stage's instructions (FROM ... AS name)."""
    stages: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] = []
    for keyword, arguments in instructions():
        if keyword == "FROM":
            current = []
            stages[arguments.split()[-1]] = current
        current.append((keyword, arguments))
    return stages


def _env_of(stage: list[tuple[str, str]]) -> dict[str, str]:
    return dict(pair.split("=", 1) for keyword, arguments in stage if keyword == "ENV" for pair in shlex.split(arguments) if "=" in pair)


def test_the_gpu_target_is_the_cpu_image_with_cuda_torch_gpu_workers_and_batching_on() -> None:
    stages = _stages()
    assert list(stages)[-1] == "runtime", "the default target (last stage) must stay the CPU image"
    gpu, runtime = stages["gpu"], stages["runtime"]
    assert gpu[0] == ("FROM", "app AS gpu") and runtime[0] == ("FROM", "app AS runtime")
    # The CUDA venv: torch from PyPI (the CUDA build), never from the CPU index.
    install = next(arguments for keyword, arguments in stages["deps-gpu"] if keyword == "RUN" and "pip install" in arguments)
    assert "-r requirements.txt" in install and "whl/cpu" not in install
    assert ("COPY", "--from=deps-gpu /opt/venv /opt/venv") in gpu and ("COPY", "--from=deps /opt/venv /opt/venv") in runtime
    # Both warm the same voice cache at build time and run as the same non-root user.
    assert [a for k, a in gpu if k in ("RUN", "USER")] == [a for k, a in runtime if k in ("RUN", "USER")]
    environ = _env_of(gpu)
    worker = load_worker_settings("vocoder", [], environ).worker
    assert worker.device == "cuda" and worker.max_batch > 1


def _package(requirement: str) -> str:
    """The distribution a requirement line names ("onnxruntime-gpu[cuda]==1.0" -> "onnxruntime-gpu")."""
    match = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert match, f"not a requirement: {requirement!r}"
    return match.group(0).lower()


def _stage_requirements(stage: str, tmp_path: Path) -> list[str]:
    """The requirements.txt that `stage`'s install step writes, by running its extraction on the real pyproject.toml."""
    install = next(arguments for keyword, arguments in _stages()[stage] if keyword == "RUN" and "pip install" in arguments)
    folder = tmp_path / stage
    folder.mkdir()
    (folder / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    command = install.partition("&&")[0].strip().replace("python -c", shlex.quote(sys.executable) + " -c", 1)
    subprocess.run(["bash", "-c", command], cwd=folder, check=True)
    return (folder / "requirements.txt").read_text().split()


def test_the_gpu_image_installs_onnxruntime_gpu_in_place_of_the_cpu_build(tmp_path: Path) -> None:
    requirements = _stage_requirements("deps-gpu", tmp_path)
    packages = [_package(requirement) for requirement in requirements]
    # Never both: they install the same `onnxruntime` module, and the CPU one has no CUDA provider.
    assert packages.count("onnxruntime-gpu") == 1 and "onnxruntime" not in packages
    pin = requirements[packages.index("onnxruntime-gpu")]
    assert re.fullmatch(r"onnxruntime-gpu(\[[a-z,]+\])?==\d+\.\d+\.\d+", pin), f"onnxruntime-gpu is not pinned: {pin}"
    # Everything else is the CPU image's list, in its order.
    others = [requirement for requirement, package in zip(requirements, packages, strict=False) if package != "onnxruntime-gpu"]
    assert others == [dependency for dependency in pyproject_dependencies() if _package(dependency) != "onnxruntime"]


def test_the_cpu_image_installs_the_cpu_onnxruntime_and_not_the_gpu_build(tmp_path: Path) -> None:
    packages = [_package(requirement) for requirement in _stage_requirements("deps", tmp_path)]
    assert "onnxruntime" in packages and "onnxruntime-gpu" not in packages


def test_make_image_builds_both_targets_under_the_names_the_manifests_use() -> None:
    from scripts.containers.build_image import TAGS

    makefile = (ROOT / "Makefile").read_text()
    targets = []
    for rule in ("image", "image-gpu"):
        recipe = makefile.split(f"\n{rule}:", 1)[1].split("\n\n", 1)[0]
        targets += re.findall(r"-m scripts\.containers\.build_image --target (\S+)", recipe)
    assert targets == ["runtime", "gpu"]
    assert [TAGS[target].split(":")[0] for target in targets] == ["tts-mesh", "tts-mesh-gpu"]
    prod = (ROOT / "k8s" / "overlays" / "prod" / "kustomization.yaml").read_text()
    assert "- name: tts-mesh\n" in prod and "- name: tts-mesh-gpu\n" in prod
