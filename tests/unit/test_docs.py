"""The docs stay true to the tree: every generated part is current, every link and anchor resolves,
every path, make target and module they name exists, every pointer from code into a doc names a
heading that is there, every alert has a runbook, and the README's commands match the code."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from google.protobuf import json_format

from libs.edge.envoy import DEFAULT_EDGE_PORT
from libs.pb.tts.v1 import tts_pb2
from libs.serving.http import DEFAULT_HTTP_PORT
from libs.serving.server import DEFAULT_PORTS
from libs.voice.registry import default_registry
from scripts import render_docs
from services.gateway.http_api import SpeechApi
from services.gateway.jobs_http import JobsHttpApi
from services.gateway.speech_body import JobBody, SpeechBody, parse_body
from tts_mesh.cli import _parser as cli_parser

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = sorted([README, ROOT / "k8s" / "README.md", *(ROOT / "docs").glob("*.md")])
CODE_DIRS = ("libs", "services", "scripts", "bench", "protos", "tts_mesh", "k8s", "dashboards", "web/src")
CODE_SUFFIXES = {".py", ".proto", ".yaml", ".yml", ".json", ".ts", ".toml"}
TOP_DIRS = ("libs", "services", "tests", "bench", "scripts", "k8s", "protos", "web", "dashboards", "assets", "docs", "tts_mesh")
PACKAGES = ("libs", "services", "scripts", "bench", "tests", "tts_mesh")
ALERT_RULES = ROOT / "k8s" / "components" / "monitoring" / "prometheus-rules.yaml"
README_MAX_LINES = 200
FIRST_SCREEN_LINES = 40

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
REPO_PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(TOP_DIRS) + r")/[\w./-]*)")
DOC_POINTER = re.compile(
    r"(?<![\w/-])((?:docs/[\w.-]+|k8s/README|README)\.md)[,\s(]+((?:(?:\"[^\"]{1,100}\"|'[^']{1,100}')(?:\s*(?:,|and)\s*)?)+)"
)
QUOTED = re.compile(r"\"([^\"]{1,100})\"|'([^']{1,100})'")


def prose_lines(path: Path) -> Iterator[tuple[int, str, bool]]:
    """Each line of a markdown file with its number and whether it sits in a fenced code block."""
    fenced = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            yield number, line, True
            continue
        yield number, line, fenced


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|\*|_(?=\w)|(?<=\w)_", "", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor of a markdown file (repeated headings numbered as GitHub does)."""
    seen: dict[str, int] = {}
    found = set()
    for _, line, fenced in prose_lines(path):
        match = HEADING.match(line)
        if fenced or not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def headings(path: Path) -> set[str]:
    return {HEADING.match(line).group(2) for _, line, fenced in prose_lines(path) if not fenced and HEADING.match(line)}  # type: ignore[union-attr]


def test_every_generated_part_of_the_docs_is_current(capsys: pytest.CaptureFixture[str]) -> None:
    assert render_docs.main(["--check"]) == 0, capsys.readouterr().out


def test_every_relative_link_and_anchor_resolves() -> None:
    broken = []
    for page in PAGES:
        for number, line, fenced in prose_lines(page):
            if fenced:
                continue
            for target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
                    continue
                file_part, _, anchor = target.partition("#")
                linked = (page.parent / file_part).resolve() if file_part else page
                where = f"{page.relative_to(ROOT)}:{number}: {target}"
                if not linked.exists():
                    broken.append(f"{where} (no such file)")
                elif anchor and (linked.suffix != ".md" or anchor not in anchors(linked)):
                    broken.append(f"{where} (no such heading)")
    assert broken == []


def test_the_anchor_rule_is_githubs() -> None:
    assert slug("Security (prod)") == "security-prod"
    assert slug("The pod's zone") == "the-pods-zone"
    assert slug("gRPC: `tts.v1.TextToSpeech`") == "grpc-ttsv1texttospeech"
    assert slug("2026-12-01, many listeners") == "2026-12-01-many-listeners"
    assert slug("40 ms slices") == "40-ms-slices"


def test_every_repository_path_the_docs_name_exists() -> None:
    missing = []
    for page in PAGES:
        for number, line, _ in prose_lines(page):
            for match in REPO_PATH.finditer(line):
                if line[match.end() : match.end() + 1] in ("*", "<", "{"):
                    continue  # a pattern or a placeholder, not a path
                path = match.group(1).rstrip(".")
                if not (ROOT / path).exists():
                    missing.append(f"{page.relative_to(ROOT)}:{number}: {path}")
    assert missing == []


def test_every_make_target_the_docs_name_exists() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([a-z][a-z0-9-]*):", makefile, re.M))
    unknown = []
    for page in PAGES:
        for number, line, fenced in prose_lines(page):
            named = re.findall(r"`make ([a-z][a-z0-9-]*)", line)
            if fenced:
                named += re.findall(r"^\s*make ([a-z][a-z0-9-]*)", line)
            unknown += [f"{page.relative_to(ROOT)}:{number}: make {target}" for target in named if target not in targets]
    assert unknown == []


def test_every_module_the_docs_run_exists() -> None:
    missing = []
    for page in PAGES:
        for number, line, _ in prose_lines(page):
            for module in re.findall(r"python3? -m ([\w.]+)", line):
                module = module.rstrip(".")
                if module.split(".")[0] not in PACKAGES:
                    continue  # pytest, pip: not ours
                path = ROOT / Path(*module.split("."))
                if not (path.with_suffix(".py").exists() or (path / "__init__.py").exists()):
                    missing.append(f"{page.relative_to(ROOT)}:{number}: {module}")
    assert missing == []


def code_files() -> Iterator[Path]:
    for folder in CODE_DIRS:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in CODE_SUFFIXES and path.is_file() and "node_modules" not in path.parts:
                yield path
    yield from (ROOT / name for name in ("Makefile", "Dockerfile", "pyproject.toml"))


def test_every_pointer_from_code_into_a_doc_names_a_heading_that_exists() -> None:
    """Code says where its rule is explained as `docs/ARCHITECTURE.md, "Determinism"`: that heading must be there."""
    stale = []
    found = 0
    for path in code_files():
        text = path.read_text(encoding="utf-8", errors="replace").replace('\\"', '"')
        for match in DOC_POINTER.finditer(text):
            doc = ROOT / match.group(1)
            names = [re.sub(r"\s*\n\s*(?:#|//)?\s*", " ", double or single) for double, single in QUOTED.findall(match.group(2))]
            found += len(names)
            if not doc.exists():
                stale.append(f"{path.relative_to(ROOT)}: {match.group(1)} does not exist")
                continue
            stale += [f"{path.relative_to(ROOT)}: {match.group(1)} has no heading {name!r}" for name in names if name not in headings(doc)]
    assert found >= 20  # the pointers are found, not silently skipped
    assert stale == [], "\n".join(stale)


def test_every_alert_has_a_runbook() -> None:
    rules = yaml.safe_load(ALERT_RULES.read_text(encoding="utf-8"))
    alerts = [rule["alert"] for group in rules["spec"]["groups"] for rule in group["rules"] if "alert" in rule]
    runbooks = headings(ROOT / "docs" / "operations.md")
    assert alerts and [alert for alert in alerts if alert not in runbooks] == []


def test_the_readme_is_short_and_reaches_a_curl_on_its_first_screen() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES
    first_curl = next(number for number, line in enumerate(lines, 1) if line.lstrip().startswith("curl "))
    assert first_curl <= FIRST_SCREEN_LINES


def _commands(page: Path) -> Iterator[str]:
    """The shell commands of a page's ```sh blocks, continuation lines joined."""
    pending, shell = "", False
    for _, line, fenced in prose_lines(page):
        if line.lstrip().startswith("```"):
            shell = fenced and line.strip() == "```sh"
            continue
        if not (fenced and shell):
            continue
        pending += line.rstrip("\\").strip() + " "
        if not line.endswith("\\"):
            yield pending.strip()
            pending = ""


def test_the_readme_http_calls_hit_real_routes_with_bodies_the_doors_take() -> None:
    registry = default_registry()
    speech, jobs = SpeechApi(None, registry, None, 65536), JobsHttpApi(None, registry, None, 1_000_000)  # type: ignore[arg-type]
    routes = {route.path for route in speech.app(jobs.routes()).routes}  # type: ignore[attr-defined]
    urls = re.findall(r"http://127\.0\.0\.1:(\d+)(/[\w/.-]*)", README.read_text(encoding="utf-8"))
    assert len(urls) >= 5
    for port, path in urls:
        assert int(port) in (DEFAULT_EDGE_PORT, DEFAULT_HTTP_PORT), port
        assert path in ("/", "/v1") or path.replace("JOB_ID", "{job_id}") in routes, path
    bodies = 0
    for command in _commands(README):
        if not command.startswith("curl ") or " -d '" not in command:
            continue
        body = json.loads(command.split(" -d '", 1)[1].split("'", 1)[0])
        if "/v1/audio/speech" in command:
            parse_body(SpeechBody, body).options(registry)  # raises HttpError for a field or value the door refuses
        elif "/v1/audio/jobs" in command:
            parse_body(JobBody, body).spec(registry)
        bodies += 1
    assert bodies >= 2


def test_the_readme_grpc_calls_name_real_methods_and_fields() -> None:
    calls = [command for command in _commands(README) if command.startswith("grpcurl ")]
    assert calls
    service = tts_pb2.DESCRIPTOR.services_by_name["TextToSpeech"]
    for command in calls:
        words = shlex.split(command)
        import_path, proto = words[words.index("-import-path") + 1], words[words.index("-proto") + 1]
        assert (ROOT / import_path / proto).exists()
        assert words[-2] in (f"127.0.0.1:{DEFAULT_EDGE_PORT}", f"127.0.0.1:{DEFAULT_PORTS['gateway']}")
        method = service.methods_by_name[words[-1].removeprefix("tts.v1.TextToSpeech/")]
        if "-d" in words:
            json_format.Parse(words[words.index("-d") + 1], getattr(tts_pb2, method.input_type.name)())


@pytest.mark.parametrize("page", [README, ROOT / "docs" / "api.md"], ids=lambda page: page.name)
def test_the_cli_commands_in_the_docs_parse(page: Path) -> None:
    found = 0
    for command in _commands(page):
        words = shlex.split(command, comments=True)
        starts = [index for index, word in enumerate(words) if word.endswith("tts-mesh")]
        if not starts:
            continue
        arguments = words[starts[0] + 1 :]
        arguments = arguments[: arguments.index("|")] if "|" in arguments else arguments
        cli_parser().parse_args(arguments)  # SystemExit on a flag the command does not have
        found += 1
    assert found >= 2
