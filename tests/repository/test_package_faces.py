"""Package faces: for each package below, its ``__init__`` exports exactly the names other code imports from it
(``__all__``), and no module of ``kora/`` outside the package imports one of its private modules.

A package's modules are private unless listed here as public, each with its reason. Tests, benches and scripts
may import a package's private modules (a test exercises a module on its own); what they import through the face
counts as used. The test reads the tree's imports with :mod:`ast`, wherever they stand (functions and
``TYPE_CHECKING`` blocks included), so a name moved between a package's modules stays importable from the package
and a name nobody outside uses is not offered.
"""

from __future__ import annotations

import ast
import importlib
from functools import cache
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
#: Where the names imported through a face are counted.
USERS = ("kora", "tests", "bench", "scripts")

#: Faced package -> its public modules (importable from outside as modules), each with its reason.
FACES: dict[str, dict[str, str]] = {
    "kora.agent.telemetry": {},
    "kora.core.serving": {},
    "kora.core.telemetry": {
        "kora.core.telemetry.routing": "a Starlette route class: the face stays free of Starlette for the resource "
        "wiring, which reads the telemetry configuration",
    },
    "kora.local": {},
    "kora.memory": {
        "kora.memory.wire": "the HTTP contract between RemoteMemory and the memory service, which imports it whole",
    },
    "kora.resources": {
        "kora.resources.crd": "also a command (python -m kora.resources.crd): imported by the package, runpy warns",
    },
    "kora.scripted": {},
}


def module_name(path: Path) -> str:
    """``a/b.py`` -> ``a.b``; ``a/__init__.py`` -> ``a``, relative to the repository."""
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


KNOWN = {module_name(path) for path in (REPO / "kora").rglob("*.py")}


def inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


@cache
def imports(roots: tuple[str, ...]) -> list[tuple[str, str, str | None]]:
    """``(importer, module, name)`` for every import in the modules under ``roots``: ``name`` is None for
    ``import module``, else the name taken by ``from module import name`` (``module.name`` when that is a module)."""
    found: list[tuple[str, str, str | None]] = []
    for root in roots:
        for path in sorted((REPO / root).rglob("*.py")):
            importer = module_name(path)
            package = importer if path.name == "__init__.py" else importer.rpartition(".")[0]
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
                if isinstance(node, ast.Import):
                    for alias in node.names:
                        found.append((importer, alias.name, None))
                elif isinstance(node, ast.ImportFrom):
                    base = node.module or ""
                    if node.level:
                        parent = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                        base = f"{parent}.{base}" if node.module else parent
                    for alias in node.names:
                        if f"{base}.{alias.name}" in KNOWN:
                            found.append((importer, f"{base}.{alias.name}", None))
                        else:
                            found.append((importer, base, alias.name))
    return found


@pytest.mark.parametrize("package", sorted(FACES))
def test_other_packages_import_through_the_face(package: str) -> None:
    public = FACES[package]
    reached = sorted(
        f"{importer} imports {module}"
        for importer, module, _ in imports(("kora",))
        if not inside(importer, package) and inside(module, package) and module != package and module not in public
    )
    assert reached == [], f"import these through {package}'s face (add the names to its __all__)"


@pytest.mark.parametrize("package", sorted(FACES))
def test_the_face_exports_exactly_what_other_code_imports(package: str) -> None:
    face = importlib.import_module(package)
    used = {
        name
        for importer, module, name in imports(USERS)
        if module == package and name is not None and not inside(importer, package)
    }
    assert sorted(face.__all__) == sorted(used)
    for name in face.__all__:
        assert getattr(face, name) is not None, name
