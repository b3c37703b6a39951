"""The seam between the engine and its kinds, read from the source (issue 24): the engine
imports no kind, its modules import each other without a circle, and every kind that
controlpanel/kinds.py names brings what the engine, the pages, the API and the CLI read of it."""

from __future__ import annotations

import ast
from importlib import import_module
from pathlib import Path

import pytest

from controlpanel.engine.models import Workload
from controlpanel.engine.registry import KindSpec, kind_of, kinds, package_of
from controlpanel.kinds import KINDS

ROOT = Path(__file__).resolve().parents[3]
ENGINE = ROOT / "controlpanel" / "engine"


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _defers(node: ast.AST) -> bool:
    """What is imported inside it is not imported when the module loads."""
    if isinstance(node, ast.If):
        return "TYPE_CHECKING" in ast.unparse(node.test)
    return isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)


def _imports(path: Path, *, top_level: bool) -> set[str]:
    """The modules a file imports: all of them, or only those imported when it loads (not in
    a function, not under `if TYPE_CHECKING`)."""
    found: set[str] = set()

    def walk(node: ast.AST, deferred: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import) and not (top_level and deferred):
                found.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and not (top_level and deferred):
                base = child.module or ""
                found.update(f"{base}.{alias.name}" for alias in child.names)
            else:
                walk(child, deferred or _defers(child))

    walk(ast.parse(path.read_text()), False)
    return found


def _engine_files() -> list[Path]:
    return [p for p in ENGINE.rglob("*.py") if "migrations" not in p.parts]


def test_the_engine_imports_no_kind() -> None:
    packages = tuple(f"{package}." for package in KINDS.values())
    named = {
        f"{_module(path)} imports {name}"
        for path in _engine_files()
        for name in _imports(path, top_level=False)
        if f"{name}.".startswith(packages)
    }
    assert named == set()


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            part = []
            while True:
                other = stack.pop()
                part.append(other)
                if other == node:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def _graph(files: list[Path]) -> dict[str, set[str]]:
    modules = {_module(path): path for path in files}

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets = {known(name) for name in _imports(path, top_level=True)}
        graph[module] = {t for t in targets if t is not None and t != module}
    return graph


def test_no_import_circle_inside_the_engine() -> None:
    assert _circles(_graph(_engine_files())) == []


def test_the_circle_finder_finds_a_circle() -> None:
    """The rule above would pass on a finder that never finds one: a circle of three and a
    module outside it."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(graph) == [["a", "b", "c"]]


@pytest.mark.parametrize("name", list(KINDS))
def test_each_kind_brings_what_the_engine_reads(name: str) -> None:
    spec = kind_of(name)
    assert isinstance(spec, KindSpec) and spec.name == name
    package = package_of(spec)
    assert spec.model._meta.proxy and spec.model._meta.concrete_model is Workload
    assert spec.driver is not None
    assert spec.waiting in spec.states.values and spec.final <= set(spec.states.values)
    assert spec.stoppable and not (spec.stoppable & spec.final)
    # Its pages, API routes and CLI group are found by the package's name alone.
    assert import_module(f"{package}.urls").urlpatterns
    assert callable(import_module(f"{package}.urls").api_routes)
    assert getattr(import_module(f"{package}.cli"), name).name == name


def test_the_registry_lists_the_kinds_in_their_order() -> None:
    assert [spec.name for spec in kinds()] == list(KINDS)
