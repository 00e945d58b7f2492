"""Every exception class of Kora is defined in ``kora/core/errors.py``, the one error tree, except those on
:data:`ALLOWED`, each with the reason it must live elsewhere.

An exception class defined next to the code that raises it is found by nobody looking for the error tree; one
module lists them all, with what each means. Classes are read with :mod:`ast`: a class is an exception when one of
its bases is a built-in exception, another exception class of ``kora/``, or a name ending in ``Error``,
``Exception`` or ``Exit`` (``httpx.HTTPError``, ``click.ClickException``).
"""

import ast
import builtins
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "kora"
ERRORS = "kora/core/errors.py"

#: ``path:class`` -> why it is not in ``kora/core/errors.py``.
ALLOWED = {
    "kora/mcp/source.py:ThirdPartyImportError": (
        "raised by the inline tools' __import__ hook, so it must be an ImportError (the import protocol: tool code's "
        "`except ImportError` catches it); its message is kora.core.inline_tools' unavailable_message, which "
        "kora/core/errors.py, importing only the standard library, cannot call"
    ),
}

_BUILTIN_EXCEPTIONS = {
    name for name, value in vars(builtins).items() if isinstance(value, type) and issubclass(value, BaseException)
}


def _base_name(base: ast.expr) -> str:
    """``Name`` -> its id, ``module.Name`` -> ``Name``, anything else (a call, a subscript) -> its source."""
    if isinstance(base, ast.Attribute):
        return base.attr
    if isinstance(base, ast.Name):
        return base.id
    if isinstance(base, ast.Subscript):
        return _base_name(base.value)
    return ast.unparse(base)


def exception_classes(root: Path = PACKAGE) -> dict[str, str]:
    """``path:class`` -> ``path:line`` for every exception class under ``root`` (paths relative to its parent)."""
    classes: dict[str, tuple[str, int, list[str]]] = {}
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                where = path.relative_to(root.parent).as_posix()
                classes[f"{where}:{node.name}"] = (where, node.lineno, [_base_name(b) for b in node.bases])
    names = {key.rpartition(":")[2] for key in classes}
    exceptions: set[str] = set()
    changed = True
    while changed:  # a class whose base is an exception class of kora/ is one too, however deep
        changed = False
        for key, (_, _, bases) in classes.items():
            name = key.rpartition(":")[2]
            if name in exceptions:
                continue
            if any(
                base in _BUILTIN_EXCEPTIONS
                or base in exceptions
                or (base not in names and base.endswith(("Error", "Exception", "Exit")))
                for base in bases
            ):
                exceptions.add(name)
                changed = True
    return {key: f"{where}:{line}" for key, (where, line, _) in classes.items() if key.rpartition(":")[2] in exceptions}


def test_every_exception_class_is_in_the_error_tree():
    outside = {
        key: where
        for key, where in exception_classes().items()
        if not key.startswith(f"{ERRORS}:") and key not in ALLOWED
    }
    assert not outside, (
        f"exception classes outside {ERRORS} (move them there, or add to ALLOWED with the reason a library "
        "requires them where they are): " + ", ".join(sorted(outside.values()))
    )


def test_every_allowed_class_still_exists():
    stale = set(ALLOWED) - set(exception_classes())
    assert not stale, f"ALLOWED names classes that are gone or no longer exceptions: {sorted(stale)}"


def test_the_check_sees_indirect_and_library_subclasses(tmp_path: Path):
    package = tmp_path / "kora"
    package.mkdir()
    (package / "a.py").write_text(
        "import httpx\n\n\nclass Base(ValueError):\n    pass\n\n\nclass Child(Base):\n    pass\n\n\n"
        "class Transport(httpx.TransportError):\n    pass\n\n\nclass Plain:\n    pass\n"
    )
    (package / "b.py").write_text("from kora.a import Child\n\n\nclass Grandchild(Child):\n    pass\n")
    assert set(exception_classes(package)) == {
        "kora/a.py:Base",
        "kora/a.py:Child",
        "kora/a.py:Transport",
        "kora/b.py:Grandchild",
    }
