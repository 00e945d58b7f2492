"""Every cross-reference in ``kora/``'s docstrings and comments that names a Kora object in full (``:func:`kora.x.y```,
``:class:`~kora.x.Y```, ``:meth:`kora.x.Y.z```, ``:mod:`kora.x```, ...) names one that exists, so a rename or a
removal cannot leave a docstring pointing at nothing.

Resolved from the source with :mod:`ast`, nothing imported: a module's names are its top-level definitions,
assignments and imports (an imported name is followed to where it is defined); a class's are its methods, fields,
nested classes and those of its Kora base classes. A class with a base from another library may have any member.
"""

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
#: ``:role:`target``` with an optional ``~`` (Sphinx shows the last part only).
REFERENCE = re.compile(r":(?:func|meth|class|mod|data|attr|exc|obj):`~?(kora(?:\.\w+)+)`")


@dataclass
class Scope:
    """The names a module or class defines: ``members`` maps a name to its nested scope (a class) or None;
    ``aliases`` maps an imported name to the full name it stands for; ``open`` is True for a class with a base
    outside Kora."""

    members: dict[str, "Scope | None"] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)
    bases: list[str] = field(default_factory=list)
    open: bool = False


def _scope(body: list[ast.stmt], package: str) -> Scope:
    scope = Scope()
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            scope.members[node.name] = None
        elif isinstance(node, ast.ClassDef):
            inner = _scope(node.body, package)
            inner.bases = [ast.unparse(base) for base in node.bases]
            scope.members[node.name] = inner
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        scope.members[name.id] = None
        elif isinstance(node, ast.AnnAssign | ast.AugAssign) and isinstance(node.target, ast.Name):
            scope.members[node.target.id] = None
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    scope.aliases[alias.asname] = alias.name
                else:  # ``import a.b`` binds ``a``
                    scope.aliases[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            for alias in node.names:
                scope.aliases[alias.asname or alias.name] = f"{base}.{alias.name}"
        elif isinstance(node, ast.If | ast.Try):
            blocks = [node.body, node.orelse] + (
                [handler.body for handler in node.handlers] + [node.finalbody] if isinstance(node, ast.Try) else []
            )
            for block in blocks:
                inner = _scope(block, package)
                scope.members.update(inner.members)
                scope.aliases.update(inner.aliases)
    return scope


def index(root: Path = REPO / "kora") -> dict[str, Scope]:
    """Every module under ``root`` by dotted name, with the names it defines."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        modules[name] = _scope(ast.parse(path.read_text(encoding="utf-8")).body, package)
    return modules


def resolves(target: str, modules: dict[str, Scope], depth: int = 0) -> bool:
    """Whether ``target`` (a full dotted name) names a module or something a module defines."""
    if target in modules:
        return True
    if depth > 10:
        return False
    module = max((name for name in modules if target.startswith(name + ".")), key=len, default=None)
    if module is None:
        return not target.startswith("kora.")  # a module of another library: not checked
    rest = target[len(module) + 1 :].split(".")
    return _member(modules[module], module, rest, modules, depth)


def _member(scope: Scope, owner: str, rest: list[str], modules: dict[str, Scope], depth: int) -> bool:
    first, *more = rest
    if first in scope.aliases:
        return resolves(".".join([scope.aliases[first], *more]), modules, depth + 1)
    if first in scope.members:
        inner = scope.members[first]
        if not more:
            return True
        return inner is not None and _class_member(inner, owner, more, modules, depth)
    return False


def _class_member(cls: Scope, module: str, rest: list[str], modules: dict[str, Scope], depth: int) -> bool:
    if rest[0] in cls.members and (len(rest) == 1 or _member(cls, module, rest, modules, depth)):
        return True
    for base in cls.bases:
        scope = modules[module]
        head = base.split("[")[0].split(".")[0]
        if head in scope.members and isinstance(scope.members[head], Scope):
            inner = scope.members[head]
            assert inner is not None
            if _class_member(inner, module, rest, modules, depth + 1):
                return True
        elif head in scope.aliases and scope.aliases[head].startswith("kora."):
            full = scope.aliases[head] + base.split("[")[0][len(head) :]
            owner = max((name for name in modules if full.startswith(name + ".")), key=len, default=None)
            if owner is not None:
                found = modules[owner].members.get(full[len(owner) + 1 :])
                if isinstance(found, Scope) and _class_member(found, owner, rest, modules, depth + 1):
                    return True
        else:
            return True  # a base from another library: its members are not Kora's to list
    return False


def references(root: Path = REPO / "kora") -> list[tuple[str, int, str]]:
    """``(file, line, target)`` of every full-name Kora cross-reference under ``root``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for match in REFERENCE.finditer(text):
            found.append((path.relative_to(REPO).as_posix(), text.count("\n", 0, match.start()) + 1, match.group(1)))
    return found


def test_every_cross_reference_names_an_existing_object():
    modules = index()
    found = references()
    assert len(found) > 100
    broken = [f"{file}:{line}: {target}" for file, line, target in found if not resolves(target, modules)]
    assert not broken, "docstrings name Kora objects that do not exist:\n" + "\n".join(broken)


def test_the_resolver_follows_modules_classes_bases_and_imports(tmp_path: Path):
    package = tmp_path / "kora"
    package.mkdir()
    (package / "__init__.py").write_text("from kora.a import A as Alias\n")
    (package / "a.py").write_text(
        "from dataclasses import dataclass, field\nfrom pydantic import BaseModel\n"
        "X = 1\n@dataclass\nclass A:\n    name: str = field(default='')\n    def run(self): ...\n"
        "class B(A):\n    class Inner:\n        deep: int\n"
        "class M(BaseModel):\n    pass\n"
    )
    modules = index(package)
    for good in ["kora.a", "kora.a.X", "kora.a.A.run", "kora.a.A.name", "kora.a.B.run", "kora.a.B.Inner.deep"]:
        assert resolves(good, modules), good
    assert resolves("kora.Alias.run", modules)
    assert resolves("kora.a.M.model_validate", modules)  # pydantic's, not Kora's to list
    for bad in ["kora.b", "kora.a.Y", "kora.a.A.walk", "kora.a.B.Inner.shallow", "kora.Alias.walk"]:
        assert not resolves(bad, modules), bad
