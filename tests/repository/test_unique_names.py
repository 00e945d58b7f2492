"""One name, one meaning: no class name, private ones included, is defined twice in ``kora/``.

Two classes of one name (two ``ModelClient``s, a resource model ``Telemetry`` beside the telemetry handle
``Telemetry``) make a reader, a search and a traceback guess which one is meant. Each class, nested ones included,
is found with :mod:`ast`; a name that two definitions share fails the test, naming every place it is defined.
"""

import ast
from collections import defaultdict
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "kora"


def class_definitions(root: Path = PACKAGE) -> dict[str, list[str]]:
    """Class name -> the ``path:line`` of each of its definitions under ``root``."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                found[node.name].append(f"{path.relative_to(root.parent)}:{node.lineno}")
    return found


def test_no_class_name_is_defined_twice():
    twice = {name: places for name, places in class_definitions().items() if len(places) > 1}
    assert not twice, "class names defined more than once (rename so each says what it is): " + "; ".join(
        f"{name}: {', '.join(places)}" for name, places in sorted(twice.items())
    )


def test_the_check_sees_private_and_nested_classes(tmp_path: Path):
    package = tmp_path / "kora"
    package.mkdir()
    (package / "a.py").write_text("class _Hidden:\n    class Inner:\n        pass\n")
    (package / "b.py").write_text("def f():\n    class Inner:\n        pass\n\n\nclass _Hidden:\n    pass\n")
    found = class_definitions(package)
    assert len(found["_Hidden"]) == 2
    assert len(found["Inner"]) == 2
