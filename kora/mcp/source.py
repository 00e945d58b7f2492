"""Load ``toolsString`` as a module and pick its tools (docs/mcp.md "Writing inline tools").

The source runs as a real module named :data:`MODULE_NAME`: top-level imports, constants and helper
functions are visible inside the tools. Every public function *defined in the source* becomes a tool
(not imported names, not names starting with ``_``, not classes or lambdas).

Only the standard library is available to inline tools. Kora's own image has many more
packages installed, so an ``import`` statement in the tools module is checked against
``sys.stdlib_module_names`` (:mod:`kora.core.inline_tools`, which manifest validation uses too); anything
else fails with :class:`ThirdPartyImportError`, which names the
module and points at the ``mcp`` package option. This is a guard rail for honest mistakes, not a sandbox:
``importlib.import_module`` gets past it.

Every problem found while loading is a :class:`ToolSourceError` carrying the 1-based line number of the
source, so ``kora mcp`` can print one clear line and exit non-zero without a traceback.

This module uses only the standard library: the tool worker processes import it.
"""

from __future__ import annotations

import builtins
import inspect
import linecache
import logging
import sys
import traceback
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kora.core.errors import ToolSourceError
from kora.core.inline_tools import is_available, unavailable_message

logger = logging.getLogger(__name__)

#: The name the tools source runs under (``sys.modules`` entry, ``__name__`` inside the tools).
MODULE_NAME = "kora_inline_tools"
#: The file name shown in tracebacks and error messages.
SOURCE_FILENAME = "<toolsString>"

#: Parameter and return types a tool may use, and how to combine them (for error messages).
SUPPORTED_TYPES_HINT = (
    "use str, int, float, bool, dict or list (also list[T], dict[str, T], Literal[...], T | None "
    "and parameters with defaults)"
)
_SCALARS: tuple[type, ...] = (str, int, float, bool)
_CONTAINERS: tuple[type, ...] = (dict, list)


class ThirdPartyImportError(ImportError):
    """An inline tool imported a module outside the standard library."""

    def __init__(self, module: str) -> None:
        super().__init__(unavailable_message(module), name=module)


def stdlib_only_import(
    name: str,
    globals: Mapping[str, object] | None = None,
    locals: Mapping[str, object] | None = None,
    fromlist: Sequence[str] = (),
    level: int = 0,
) -> types.ModuleType:
    """``__import__`` for the tools module: standard-library modules only.

    Raises ``ThirdPartyImportError`` for anything else (and for relative imports, which have no package
    to be relative to).
    """
    if not is_available(name, level):
        raise ThirdPartyImportError(name if level == 0 else "." * level + name)
    module: types.ModuleType = builtins.__import__(name, globals, locals, fromlist, level)
    return module


@dataclass(frozen=True)
class ToolFunction:
    """One tool: the function, its name, its docstring (cleaned, ``""`` if absent) and its ``def`` line."""

    name: str
    function: Callable[..., Any]
    doc: str
    line: int


@dataclass(frozen=True)
class LoadedTools:
    """The loaded tools module and its tools in source order."""

    module: types.ModuleType
    tools: dict[str, ToolFunction]


def _source_line(exc: BaseException, filename: str) -> int | None:
    """The deepest traceback line inside the tools source, or the syntax error's line."""
    if isinstance(exc, SyntaxError) and exc.filename == filename:
        return exc.lineno
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename == filename:
            line = frame.lineno
    return line


def compile_module(source: str, filename: str = SOURCE_FILENAME) -> types.ModuleType:
    """Compile and run ``source`` as module :data:`MODULE_NAME` with stdlib-only imports.

    The module is registered in ``sys.modules`` (so ``typing.get_type_hints``, ``dataclasses`` and
    ``pickle`` work inside it) and its lines in ``linecache`` (so tracebacks show the source).
    Raises ``ToolSourceError`` when the source does not compile or its top level raises. The message of
    a top-level exception is included as is: callers redact it before showing it anywhere.
    """
    try:
        code = compile(source, filename, "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise ToolSourceError(f"does not compile: {exc.msg}", exc.lineno) from None
    except ValueError as exc:  # e.g. null bytes in the source
        raise ToolSourceError(f"does not compile: {exc}") from None
    module = types.ModuleType(MODULE_NAME)
    module.__file__ = filename
    # Imports inside the tools module look up ``__import__`` in the module's own builtins.
    restricted = dict(vars(builtins))
    restricted["__import__"] = stdlib_only_import
    module.__dict__["__builtins__"] = restricted
    lines = source.splitlines(keepends=True)
    linecache.cache[filename] = (len(source), None, lines, filename)
    sys.modules[MODULE_NAME] = module
    try:
        exec(code, module.__dict__)
    except ThirdPartyImportError as exc:
        raise ToolSourceError(str(exc), _source_line(exc, filename)) from None
    except (Exception, SystemExit) as exc:
        raise ToolSourceError(
            f"raised {type(exc).__name__} while loading: {exc}", _source_line(exc, filename)
        ) from None
    return module


def find_tools(module: types.ModuleType, filename: str = SOURCE_FILENAME) -> dict[str, ToolFunction]:
    """Public functions defined in the tools source itself, in source order.

    A function counts when it is bound under its own name, its name has no leading ``_`` and its code
    comes from ``filename`` (so ``from math import sqrt`` and ``alias = tool`` add nothing).
    Raises ``ToolSourceError`` when there is none.
    """
    found: list[ToolFunction] = []
    for name, value in vars(module).items():
        if name.startswith("_") or not isinstance(value, types.FunctionType):
            continue
        if value.__name__ != name or value.__code__.co_filename != filename:
            continue
        doc = inspect.cleandoc(value.__doc__) if value.__doc__ else ""
        found.append(ToolFunction(name=name, function=value, doc=doc, line=value.__code__.co_firstlineno))
    if not found:
        raise ToolSourceError(
            "defines no tool: write at least one public function (a `def` whose name does not start with `_`) "
            "with typed parameters, a docstring and a return value"
        )
    found.sort(key=lambda tool: tool.line)
    return {tool.name: tool for tool in found}


def is_supported_type(annotation: object, *, nested: bool = False, is_return: bool = False) -> bool:
    """Whether a parameter (or return) annotation is one inline tools may use (see ``SUPPORTED_TYPES_HINT``).

    ``Any`` is accepted only inside ``list[...]``/``dict[str, ...]``; ``None`` only in a union or as a return.
    """
    if annotation in _SCALARS or annotation in _CONTAINERS:
        return True
    if annotation is type(None) or annotation is None:
        return nested or is_return
    if annotation is Any:
        return nested
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return is_supported_type(args[0], nested=nested, is_return=is_return)
    if origin is typing.Union or origin is types.UnionType:
        return all(is_supported_type(arg, nested=True) for arg in args)
    if origin is typing.Literal:
        return all(isinstance(arg, str | int | bool) for arg in args)
    if origin is list:
        return all(is_supported_type(arg, nested=True) for arg in args)
    if origin is dict:
        return len(args) == 2 and args[0] is str and is_supported_type(args[1], nested=True)
    return False


def _type_name(annotation: object) -> str:
    if isinstance(annotation, type) and typing.get_origin(annotation) is None:
        return annotation.__name__
    return repr(annotation).replace("typing.", "")


def check_tool(tool: ToolFunction) -> None:
    """Enforce the tool definition rules on one tool's signature.

    Every parameter needs a supported annotation and must be passable by keyword (no ``*args``,
    ``**kwargs`` or positional-only parameters); a return annotation, if given, must be supported too.
    Raises ``ToolSourceError`` with the ``def`` line. A missing docstring only logs a warning: the model
    then sees an empty description.
    """
    where = f"tool {tool.name!r}"
    try:
        hints = typing.get_type_hints(tool.function, include_extras=True)
    except Exception as exc:
        raise ToolSourceError(f"{where}: cannot resolve its type hints: {exc}", tool.line) from None
    for parameter in inspect.signature(tool.function).parameters.values():
        label = f"{where} parameter {parameter.name!r}"
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD, parameter.POSITIONAL_ONLY):
            raise ToolSourceError(
                f"{label}: *args, **kwargs and positional-only parameters are not supported", tool.line
            )
        if parameter.name.startswith("_"):
            raise ToolSourceError(f"{label}: parameter names must not start with '_'", tool.line)
        if parameter.name not in hints:
            raise ToolSourceError(f"{label} has no type annotation; {SUPPORTED_TYPES_HINT}", tool.line)
        annotation = hints[parameter.name]
        if not is_supported_type(annotation):
            raise ToolSourceError(
                f"{label}: type {_type_name(annotation)} is not supported; {SUPPORTED_TYPES_HINT}", tool.line
            )
    if "return" in hints and not is_supported_type(hints["return"], is_return=True):
        raise ToolSourceError(
            f"{where}: return type {_type_name(hints['return'])} is not supported; {SUPPORTED_TYPES_HINT}",
            tool.line,
        )
    if not tool.doc:
        logger.warning("%s (line %d) has no docstring: the model sees an empty description", where, tool.line)


def load_tools(source: str, filename: str = SOURCE_FILENAME, *, check: bool = True) -> LoadedTools:
    """Load ``source`` and return its tools, checked against the tool definition rules when ``check``.

    Raises ``ToolSourceError`` (with a line number where one applies) for source that does not compile,
    raises at its top level, imports a non-stdlib module, defines no tool or uses an unsupported type.
    """
    module = compile_module(source, filename)
    tools = find_tools(module, filename)
    if check:
        for tool in tools.values():
            check_tool(tool)
    return LoadedTools(module=module, tools=tools)
