"""Which imports inline tools (an MCPServer's ``toolsString``) may use: the Python standard library only.

An MCPServer's ``spec.config.toolsString`` may import only the standard library (docs/mcp.md). Two places
apply the rule with this module: manifest validation (:func:`unavailable_imports`, from the source's syntax
tree, so ``kora up`` and the admission webhook report the line before anything starts) and the tool server's
import guard (``kora.mcp.source``, at run time). The tool server adds nothing to what tools may import.

Standard library only: the MCP tool workers import it.
"""

from __future__ import annotations

import ast
import sys

__all__ = ["is_available", "unavailable_imports", "unavailable_message"]

#: Exceptions whose handler makes an import optional: ``try: import x`` / ``except ImportError: ...``.
_OPTIONAL_IMPORT_HANDLERS = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})


def is_available(module: str, level: int = 0) -> bool:
    """Whether inline tools may import ``module`` (dotted name; ``level`` > 0 for a relative import, which
    has no package to be relative to)."""
    return level == 0 and module.partition(".")[0] in sys.stdlib_module_names


def unavailable_message(module: str) -> str:
    """What a tool's author reads for ``module``: why it fails and where such tools belong."""
    return (
        f"module {module!r} is not available: inline tools can use only the Python standard library. "
        "Tools that need other packages belong in a package served with the MCPServer's `mcp` option "
        "(kora mcp --package NAME)."
    )


def unavailable_imports(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, module)`` of every import in ``tree`` that inline tools cannot use, in source order.

    Imports anywhere count (one inside a function fails when the tool is called); an import in a ``try``
    whose handler catches ``ImportError`` (or a broader class) is optional and is left out, as is one under
    ``if TYPE_CHECKING:``, which never runs.
    """
    found: list[tuple[int, str]] = []
    pending: list[ast.AST] = [tree]  # a stack, not recursion: a long chain such as 1+1+...+1 is a deep tree
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names if not is_available(alias.name))
        elif isinstance(node, ast.ImportFrom):
            if not is_available(node.module or "", node.level):
                found.append((node.lineno, "." * node.level + (node.module or "")))
        elif isinstance(node, ast.Try | ast.TryStar) and any(_catches_import_error(h) for h in node.handlers):
            pending.extend([*node.handlers, *node.orelse, *node.finalbody])
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            pending.extend(node.orelse)
        else:
            pending.extend(ast.iter_child_nodes(node))
    return sorted(found)


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(name, ast.Name) and name.id in _OPTIONAL_IMPORT_HANDLERS for name in names)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )
