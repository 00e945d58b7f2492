"""The face of ``kora.agent.telemetry`` is exactly what the rest of the tree imports from it: a name moved between
its modules stays importable from the package, and a name nobody outside uses is not offered."""

import ast
from pathlib import Path

import pytest

import kora.agent.telemetry as telemetry

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "kora" / "agent" / "telemetry"


def imported_from_the_package() -> set[str]:
    """The names modules outside the package import with ``from kora.agent.telemetry import ...``."""
    names: set[str] = set()
    for root in ("kora", "tests", "bench", "scripts"):
        for path in (REPO / root).rglob("*.py"):
            if PACKAGE in path.parents:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and node.module == "kora.agent.telemetry":
                    names.update(alias.name for alias in node.names)
    return names


def test_the_face_exports_exactly_what_the_tree_imports():
    assert set(telemetry.__all__) == imported_from_the_package()
    for name in telemetry.__all__:
        assert getattr(telemetry, name) is not None, name
