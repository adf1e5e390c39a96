"""The shape of the code that the next engineer relies on: imports that form
no cycle, functions short enough to read, and each public name at one home.
Read from the source with ``ast`` and from the packages' ``__all__``."""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

from test_public_api import MODULES

ROOT = Path(__file__).resolve().parent.parent / "rosterd"
LONGEST_FUNCTION = 80


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


SOURCES = {module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def imported(module: str, node: ast.ImportFrom | ast.Import) -> Iterator[str]:
    """The rosterd modules an import statement in *module* loads: the named
    module, any submodule it names, and every package above them (whose
    ``__init__`` runs first)."""
    targets: list[str] = []
    if isinstance(node, ast.Import):
        targets = [alias.name for alias in node.names]
    else:
        package = module if SOURCES[module].name == "__init__.py" else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = ".".join(filter(None, (package if node.level else "", node.module or "")))
        targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
    # The packages above *module* are loading already when it runs.
    loading = {module.rsplit(".", n)[0] for n in range(module.count(".") + 1)}
    for target in targets:
        parts = target.split(".")
        for end in range(1, len(parts) + 1):
            name = ".".join(parts[:end])
            if name in SOURCES and name not in loading:
                yield name


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def module_imports(module: str) -> tuple[set[str], set[str]]:
    """What *module* imports when it loads, and what only under TYPE_CHECKING."""
    tree = ast.parse(SOURCES[module].read_text())
    loaded: set[str] = set()
    typing_only: set[str] = set()

    def walk(statements: list[ast.stmt], into: set[str]) -> None:
        for statement in statements:
            if isinstance(statement, (ast.Import, ast.ImportFrom)):
                into.update(imported(module, statement))
            elif isinstance(statement, ast.If):
                walk(statement.body, typing_only if is_type_checking(statement.test) else into)
                walk(statement.orelse, into)
            elif isinstance(statement, ast.Try):
                walk(statement.body, into)

    walk(tree.body, loaded)
    loaded.discard(module)
    typing_only.discard(module)
    return loaded, typing_only


def reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = {start}, [start]
    while todo:
        for nxt in graph[todo.pop()]:
            if nxt == goal:
                return True
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return False


def test_no_type_checking_import_closes_a_cycle() -> None:
    edges = {module: module_imports(module) for module in SOURCES}
    graph = {module: loaded | typing_only for module, (loaded, typing_only) in edges.items()}
    closing = [
        f"{module} -> {target}"
        for module, (_, typing_only) in edges.items()
        for target in sorted(typing_only)
        if reaches(graph, target, module)
    ]
    assert closing == []


def test_the_import_graph_is_read() -> None:
    # The reader finds relative, absolute and package imports, so an empty
    # answer above means no cycle, not nothing read.
    loaded, _ = module_imports("rosterd.compiler._turn")
    assert {"rosterd.org", "rosterd.compiler._trace", "rosterd.compiler._items"} <= loaded
    assert "rosterd.compiler" not in loaded  # loading already: _turn is part of it
    _, typing_only = module_imports("rosterd.compiler._memory")
    assert "rosterd.compiler._scoring" in typing_only


def long_functions(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            assert node.end_lineno is not None
            length = node.end_lineno - node.lineno + 1
            if length > LONGEST_FUNCTION:
                yield f"{path.relative_to(ROOT.parent)}:{node.lineno} {node.name} ({length})"


def test_no_function_is_over_80_lines() -> None:
    assert [found for path in SOURCES.values() for found in long_functions(path)] == []


def test_a_public_name_has_one_home() -> None:
    # A class or function of rosterd is exported by one package alone:
    # readers import it from one place, and a reader of the state does not
    # load another package's dependencies to reach it.
    homes: dict[int, list[str]] = {}
    for name in MODULES:
        module = importlib.import_module(name)
        for attr in module.__all__:
            thing = getattr(module, attr)
            if callable(thing) and getattr(thing, "__module__", "").startswith("rosterd"):
                homes.setdefault(id(thing), []).append(f"{name}.{attr}")
    assert [places for places in homes.values() if len(places) > 1] == []
