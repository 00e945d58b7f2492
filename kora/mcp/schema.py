"""Per-parameter descriptions from docstrings, and the signature the SDK derives JSON schemas from.

The SDK's ``MCPServer`` turns a function's type hints into the tool's JSON input schema but uses the
whole docstring as the description and ignores the per-parameter text. Here griffe parses the docstring
in Google, NumPy or Sphinx style (whichever describes the most parameters) so each parameter's text can be
added to its property in the schema (docs/mcp.md "Writing inline tools").
"""

from __future__ import annotations

import inspect
import logging
import typing
from collections.abc import Callable, Iterable
from typing import Any, Literal

_STYLES: tuple[Literal["google", "numpy", "sphinx"], ...] = ("google", "numpy", "sphinx")


def parameter_descriptions(doc: str, names: Iterable[str]) -> dict[str, str]:
    """``{parameter: description}`` for the parameters in ``names`` that ``doc`` describes.

    Tries each docstring style and keeps the one that describes the most of ``names``; returns ``{}``
    for an empty docstring or one without a parameter section. Never raises for odd docstrings.
    """
    wanted = set(names)
    if not doc.strip() or not wanted:
        return {}
    import griffe  # only the server needs it, and only at start-up

    best: dict[str, str] = {}
    griffe_logger = logging.getLogger("griffe")
    previous = griffe_logger.disabled
    griffe_logger.disabled = True  # griffe warns about missing annotations in docstrings; not our concern
    try:
        for style in _STYLES:
            try:
                sections = griffe.Docstring(doc).parse(style)
            except Exception:  # a docstring griffe cannot read is just a docstring without parameter texts
                continue
            found = {
                parameter.name: " ".join(parameter.description.split())
                for section in sections
                if section.kind is griffe.DocstringSectionKind.parameters
                for parameter in section.value
                if parameter.name in wanted and parameter.description.strip()
            }
            if len(found) > len(best):
                best = found
    finally:
        griffe_logger.disabled = previous
    return best


def _widen(annotation: object) -> object:
    """Bare ``dict``/``list`` -> ``dict[str, Any]``/``list[Any]``, so the SDK publishes structured output for them."""
    if annotation is dict:
        return dict[str, Any]
    if annotation is list:
        return list[Any]
    return annotation


def schema_signature(function: Callable[..., Any]) -> inspect.Signature:
    """``function``'s signature with its type hints resolved (and bare ``dict``/``list`` returns widened).

    The SDK builds the tool's input schema, argument validation and output schema from this.
    """
    hints = typing.get_type_hints(function, include_extras=True)
    signature = inspect.signature(function)
    parameters = [
        parameter.replace(annotation=hints.get(parameter.name, parameter.annotation))
        for parameter in signature.parameters.values()
    ]
    returns = _widen(hints["return"]) if "return" in hints else inspect.Signature.empty
    return signature.replace(parameters=parameters, return_annotation=returns)


def add_parameter_descriptions(schema: dict[str, Any], descriptions: dict[str, str]) -> None:
    """Set ``description`` on each described property of a JSON object schema, in place."""
    properties = schema.get("properties", {})
    for name, text in descriptions.items():
        if isinstance(properties.get(name), dict):
            properties[name]["description"] = text
