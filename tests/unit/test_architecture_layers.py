"""docs/ARCHITECTURE.md's claims about the layers hold for the code: the floors it draws, no arrow up
or sideways between packages, no import cycle between modules, and nothing in libs/ importing services/."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"
FLOOR_LINE = re.compile(r"^floor (\d+)\s+(.+)$")


def floors() -> dict[str, int]:
    """Package (`libs.cache`, `services.gateway`, `services.settings`) -> its floor, as the document draws it."""
    drawn: dict[str, int] = {}
    for line in ARCHITECTURE.read_text(encoding="utf-8").splitlines():
        match = FLOOR_LINE.match(line.strip())
        if not match:
            continue
        for token in re.sub(r"\([^)]*\)", "", match.group(2)).split():
            name = token.removesuffix(".py").replace("/", ".")
            package = name if name.startswith("services.") else f"libs.{name}"
            assert package not in drawn, f"{package} is drawn on two floors"
            drawn[package] = int(match.group(1))
    return drawn


def modules() -> dict[str, Path]:
    """Every module of libs/ and services/ (the generated stubs of libs/pb excluded) by dotted name."""
    found = {}
    for path in sorted([*ROOT.glob("libs/**/*.py"), *ROOT.glob("services/**/*.py")]):
        relative = path.relative_to(ROOT)
        if relative.parts[:2] == ("libs", "pb"):
            continue
        name = ".".join(relative.with_suffix("").parts).removesuffix(".__init__")
        if "." in name:  # the top-level libs/__init__.py and services/__init__.py hold no code
            found[name] = path
    return found


def imports_of(path: Path, known: set[str]) -> Iterator[str]:
    """The project modules `path` imports, anywhere in it (a function's lazy import included). `from
    package import module` depends on the module, `from module import name` on the module."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name.split(".")[0] in ("libs", "services"))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] not in ("libs", "services"):
                continue
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                yield submodule if submodule in known else node.module


def package_of(module: str) -> str:
    parts = module.split(".")
    if parts[0] == "services" and len(parts) == 2 and parts[1] == "settings":
        return "services.settings"
    return ".".join(parts[:2])


def module_graph() -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    return {name: {target for target in imports_of(path, known) if target != name} for name, path in found.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_package_is_drawn_on_exactly_one_floor() -> None:
    drawn = floors()
    packages = {package_of(name) for name in modules()} | {"libs.pb"}
    assert packages - set(drawn) == set(), "packages the document does not draw"
    assert set(drawn) - packages == set(), "floors name packages that do not exist"


def test_a_package_imports_only_packages_on_lower_floors() -> None:
    drawn = floors()
    wrong = sorted(
        f"{module} ({drawn[package_of(module)]}) imports {target} ({drawn[package_of(target)]})"
        for module, targets in module_graph().items()
        for target in targets
        if package_of(target) != package_of(module) and drawn[package_of(target)] >= drawn[package_of(module)]
    )
    assert wrong == []


def test_no_module_imports_a_module_that_imports_it_back() -> None:
    assert cycles(module_graph()) == []


def test_nothing_in_libs_imports_services() -> None:
    graph = module_graph()
    assert [f"{module} -> {target}" for module in graph if module.startswith("libs.") for target in graph[module] if target.startswith("services.")] == []


def test_the_checks_see_a_drawn_cycle_and_an_arrow_up() -> None:
    """The checks themselves can fail: a cycle and an upward import made up here are both found."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    drawn = floors()
    assert drawn["libs.synthesis"] > drawn["libs.cache"]  # so libs.cache importing libs.synthesis would be listed
