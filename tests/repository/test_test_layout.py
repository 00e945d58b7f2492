"""The test tree mirrors the source: each test module lives in ``tests/<package>/`` for a package of ``kora/``
(or ``tests/repository/`` for checks over the whole tree, ``tests/e2e/`` for the product driven from outside) and
names its tier with exactly one of the markers ``unit``, ``integration``, ``e2e``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
TIERS = {"unit", "integration", "e2e"}
#: Folders of tests/ that are not a package of kora/: the whole-tree checks and the outside-in tier.
OWN_FOLDERS = {"repository", "e2e"}
#: Folders of tests/ that hold no test modules.
SUPPORT_FOLDERS = {"support", "data", "__pycache__"}


def modules_under_tests() -> list[Path]:
    return sorted(TESTS.rglob("test_*.py"))


def tier_markers(module: Path) -> list[str]:
    """The tier markers of ``module``'s ``pytestmark`` (a marker or a list of them)."""
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets):
            values = node.value.elts if isinstance(node.value, ast.List) else [node.value]
            return [v.attr for v in values if isinstance(v, ast.Attribute) and v.attr in TIERS]
    return []


def test_every_test_module_is_in_a_folder_named_for_what_it_tests() -> None:
    packages = {p.name for p in (REPO / "kora").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    packages |= {p.stem for p in (REPO / "kora").glob("*.py") if p.stem != "__init__"}
    misplaced = [
        str(m.relative_to(REPO))
        for m in modules_under_tests()
        if m.relative_to(TESTS).parts[0] not in packages | OWN_FOLDERS
    ]
    assert misplaced == []
    folders = {p.name for p in TESTS.iterdir() if p.is_dir()} - SUPPORT_FOLDERS
    assert folders <= packages | OWN_FOLDERS


def test_every_test_module_names_exactly_one_tier() -> None:
    wrong = {str(m.relative_to(REPO)): tier_markers(m) for m in modules_under_tests() if len(tier_markers(m)) != 1}
    assert wrong == {}


def test_e2e_modules_are_marked_e2e() -> None:
    assert [m.name for m in (TESTS / "e2e").rglob("test_*.py") if tier_markers(m) != ["e2e"]] == []


def test_every_test_file_the_tree_names_exists() -> None:
    """Docs, scripts, benches and docstrings that point a reader at a test module point at one that exists."""
    named = re.compile(r"tests/[\w/]+\.py")
    sources = [REPO / "README.md", *(REPO / "docs").rglob("*.md"), *(REPO / "bench").rglob("*.md")]
    sources += [*(REPO / "kora").rglob("*.py"), *(REPO / "scripts").rglob("*.py"), *(REPO / "scripts").rglob("*.sh")]
    sources += [*(REPO / "bench").rglob("*.py"), *TESTS.rglob("*.py")]
    missing = {
        f"{source.relative_to(REPO)}: {path}"
        for source in sources
        for path in named.findall(source.read_text(encoding="utf-8"))
        if not (REPO / path).exists()
    }
    assert missing == set()
