"""No import cycle in ``kora/``, counting every import: those inside functions and under ``TYPE_CHECKING`` too.

import-linter's contracts (``lint-imports``) check that layers import downward, but they skip ``TYPE_CHECKING``
imports (``exclude_type_checking_imports``) and cannot order two modules of one layer, so two modules that import
each other, one of them lazily, pass them. This test reads every module's source with :mod:`ast` and walks the
graph of all its ``import`` and ``from ... import`` statements, wherever they stand.
"""

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "kora"


def module_name(path: Path, root: Path) -> str:
    """``<root>/a/b.py`` -> ``<root name>.a.b``; ``<root>/a/__init__.py`` -> ``<root name>.a``."""
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path) -> dict[str, Path]:
    """Every module of the package at ``root`` by dotted name."""
    return {module_name(path, root): path for path in sorted(root.rglob("*.py"))}


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that module ``name`` (source at ``path``) imports anywhere in its body.

    ``from p import x`` names module ``p.x`` when that is a module, else ``p`` (``x`` is a name defined in ``p``);
    relative imports are resolved against ``name``'s package."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {target for target in found if target in known and target != name}


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the modules of the same tree it imports."""
    found = modules(root)
    known = set(found)
    return {name: imported(name, path, known) for name, path in found.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component with more than one module (Tarjan), each as a path that
    starts and ends at its smallest module name."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component: set[str] = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(_path_through(graph, component) for component in components)


def _path_through(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest cycle through the smallest module of ``component`` (breadth-first, inside it)."""
    start = min(component)
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for target in sorted(graph[node] & component):
                if target == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [*reversed(path), start]
                if target not in parents:
                    parents[target] = node
                    following.append(target)
        frontier = following
    raise AssertionError(f"no cycle through {start} in {sorted(component)}")


def test_the_import_graph_covers_the_package():
    graph = import_graph()
    assert len(graph) == len(list(PACKAGE.rglob("*.py")))
    assert "kora.core.serving" in graph["kora.memory_service.runtime"]
    assert "kora.memory_service.jobs" in graph["kora.memory_service.runtime"]


def test_no_import_cycle_in_kora():
    found = cycles(import_graph())
    assert not found, "import cycles in kora/ (counting function-level and TYPE_CHECKING imports):\n" + "\n".join(
        " -> ".join(cycle) for cycle in found
    )


def test_the_reader_sees_lazy_type_checking_and_relative_imports(tmp_path: Path):
    package = tmp_path / "kora" / "pkg"
    package.mkdir(parents=True)
    (tmp_path / "kora" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("from .a import A\n")
    (package / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from kora.pkg.b import B\n")
    (package / "b.py").write_text("def f():\n    from . import c\n")
    (package / "c.py").write_text("import kora.pkg.a\nfrom kora.pkg import d\n")
    (package / "d.py").write_text("x = 1\n")
    graph = import_graph(tmp_path / "kora")
    assert graph == {
        "kora": set(),
        "kora.pkg": {"kora.pkg.a"},
        "kora.pkg.a": {"kora.pkg.b"},
        "kora.pkg.b": {"kora.pkg.c"},
        "kora.pkg.c": {"kora.pkg.a", "kora.pkg.d"},
        "kora.pkg.d": set(),
    }
    assert cycles(graph) == [["kora.pkg.a", "kora.pkg.b", "kora.pkg.c", "kora.pkg.a"]]
