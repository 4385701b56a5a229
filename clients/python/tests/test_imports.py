"""The package's modules import one another without a cycle: every import
between modules of src/draftd, read from the source with ast — at module
level, inside functions, and under ``if TYPE_CHECKING:`` (a cycle that only
the type checker follows is still a cycle a reader has to untangle) — makes
a graph, and the graph has no cycle. The session helper is built on the
HTTP clients, never the other way round."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "draftd"


def module_imports(package: Path) -> dict[str, set[str]]:
    """For each module of package (by name, "__init__" for the package
    itself), the package's modules it imports."""
    mods = {p.stem for p in package.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in sorted(package.glob("*.py")):
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level == 1 or (node.level == 0 and node.module and node.module.split(".")[0] == package.name):
                    parts = (node.module or "").split(".")
                    base = parts[1] if node.level == 0 and len(parts) > 1 else (parts[0] if node.level == 1 else "")
                    if base:
                        deps.add(base)  # from .x import y / from draftd.x import y
                    else:
                        deps.update(a.name for a in node.names if a.name in mods)  # from . import x
            elif isinstance(node, ast.Import):
                for a in node.names:
                    parts = a.name.split(".")
                    if parts[0] == package.name:
                        deps.add(parts[1] if len(parts) > 1 else "__init__")
        deps.discard(path.stem)
        graph[path.stem] = {d for d in deps if d in mods}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of graph as a path (first node repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                return path[path.index(d):] + [d]
            if d not in state and (c := visit(d)):
                return c
        path.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (c := visit(m)):
            return c
    return None


def test_no_import_cycle() -> None:
    graph = module_imports(PACKAGE)
    assert {"client", "session", "_http", "types", "errors"} <= graph.keys(), graph
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_session_built_on_the_client() -> None:
    graph = module_imports(PACKAGE)
    assert "_http" in graph["session"], graph["session"]
    assert "session" in graph["client"], graph["client"]
    assert "session" not in graph["_http"] and "client" not in graph["session"], graph


def test_the_check_finds_cycles(tmp_path: Path) -> None:
    pkg = tmp_path / "draftd"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from .client import Client\n")
    (pkg / "client.py").write_text("from .session import Session\n")
    (pkg / "session.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .client import Client\n")
    assert find_cycle(module_imports(pkg)) == ["client", "session", "client"]
    (pkg / "session.py").write_text("def f():\n    from draftd import client\n")
    assert find_cycle(module_imports(pkg)) == ["client", "session", "client"]
    (pkg / "session.py").write_text("import draftd.client\n")
    assert find_cycle(module_imports(pkg)) == ["client", "session", "client"]
    (pkg / "session.py").write_text("from . import types\n")
    assert find_cycle(module_imports(pkg)) is None
