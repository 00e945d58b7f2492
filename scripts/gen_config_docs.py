"""Regenerate the variable tables of docs/configuration.md from the workloads' settings models.

    python scripts/gen_config_docs.py

Each table sits between ``<!-- BEGIN GENERATED <block> -->`` and ``<!-- END GENERATED <block> -->`` lines of
the document; everything outside them is written by hand and kept as it is. A table lists, per variable, its
type, default, whether it is required and its description:

- a settings model's fields come from its JSON schema: the name upper-cased (the rule every loader applies),
  the type with its bounds or choices, ``format: uri`` shown as URL, the ``Field(description=...)`` and any
  ``examples``. A field without a description is an error, so a new setting cannot go undocumented;
- variables that no model declares (per-name families such as ``MCP_SERVER_<NAME>_URL``, variables read by
  hand) come from the :class:`~kora.core.env.VariableDoc` entries next to the code that reads them.

``tests/repository/test_config_docs.py`` fails while the committed document differs from what this writes. This
script imports the workloads' settings modules, so it lives outside the ``kora`` package: nothing on a
workload's run path imports it.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaValue

from kora.agent.settings import NAMED_VARIABLES, AgentSettings
from kora.console.settings import ConsoleSettings
from kora.core.env import VariableDoc
from kora.hosted.settings import ENV_PREFIX as HOSTED_PREFIX
from kora.hosted.settings import HostedSettings
from kora.mcp.settings import McpSettings
from kora.memory_service.settings import ENV_PREFIX as MEMORY_PREFIX
from kora.memory_service.settings import MemoryServiceSettings
from kora.operator.settings import VARIABLES as OPERATOR_VARIABLES
from kora.operator.settings import OperatorSettings
from kora.proxy.model_proxy import ENV_PREFIX as PROXY_PREFIX
from kora.proxy.model_proxy import ProxySettings

#: The document this script maintains.
DOC = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
#: How to run this script (quoted in error messages).
COMMAND = "python scripts/gen_config_docs.py"

_BLOCK = re.compile(
    r"^<!-- BEGIN GENERATED (?P<name>[\w-]+) -->\n.*?^<!-- END GENERATED (?P=name) -->$", re.DOTALL | re.MULTILINE
)
_HEADER = ("variable", "type", "default", "required", "description")


@dataclass(frozen=True)
class Workload:
    """One generated table: the ``block`` name in the document's markers, the ``model`` whose fields it lists
    (None: a workload without one) and the ``variables`` that no model declares, listed after the fields."""

    block: str
    model: type[BaseModel] | None
    variables: tuple[VariableDoc, ...] = ()
    prefix: str = ""


WORKLOADS = (
    Workload("agent", AgentSettings, NAMED_VARIABLES),
    Workload("mcp", McpSettings),
    Workload("model-proxy", ProxySettings, prefix=PROXY_PREFIX),
    Workload("memory", MemoryServiceSettings, prefix=MEMORY_PREFIX),
    Workload("model-hosted", HostedSettings, prefix=HOSTED_PREFIX),
    Workload("operator", OperatorSettings, OPERATOR_VARIABLES),
    Workload("console", ConsoleSettings),
)


def _bounds(schema: JsonSchemaValue) -> str:
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None and high is not None:
        return f" {low}-{high}"
    parts = [
        f"{symbol} {schema[key]}"
        for key, symbol in (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="), ("exclusiveMaximum", "<"))
        if key in schema
    ]
    return "".join(f" {part}" for part in parts)


def render_type(schema: JsonSchemaValue) -> str:
    """The type column for one property of a JSON schema: ``int 1-65535``, ``float > 0``, ``bool``, ``URL``,
    ``path``, ``non-empty string``, choices as ``a/b/c`` (sorted when optional). ``T | None`` shows as ``T``
    (the default says "unset"). Raises ``ValueError`` for a shape it cannot describe (a union, an object)."""
    options = [option for option in schema.get("anyOf", [schema]) if option.get("type") != "null"]
    if len(options) != 1:
        raise ValueError(f"cannot describe a union type: {schema}")
    (option,) = options
    if "enum" in option:
        values = [str(value) for value in option["enum"]]
        # typing caches unions by equality, and Literal["a", "b"] == Literal["b", "a"]: inside ``| None`` the
        # order is whichever module spelled it first, so sort there to keep the doc independent of imports.
        return "/".join(sorted(values) if "anyOf" in schema else values)
    kind = option.get("type")
    if kind == "string":
        named = {"uri": "URL", "path": "path"}.get(option.get("format", ""))
        return named or ("non-empty string" if option.get("minLength", 0) > 0 else "string")
    if kind in ("integer", "number"):
        return ("int" if kind == "integer" else "float") + _bounds(option)
    if kind == "boolean":
        return "bool"
    raise ValueError(f"cannot describe type {kind!r}: {schema}")


def render_default(value: object) -> str:
    """The default column for a JSON value: ``unset`` for null, ``empty`` for ``""``, otherwise the value as
    an environment variable would spell it (``true``, ``120``, ``INFO``) in backticks."""
    if value is None:
        return "unset"
    if value == "":
        return "empty"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float):
        return f"`{value:g}`"
    return f"`{value}`"


def model_variables(model: type[BaseModel], prefix: str = "") -> list[VariableDoc]:
    """One :class:`VariableDoc` per field of ``model``'s JSON schema, in declaration order; each variable is
    ``prefix`` + the field's name in upper case.

    Fields marked ``SkipJsonSchema`` (values resolved by a loader, not read under their own names) are left
    out. Raises ``ValueError`` naming a field that has no description or a type :func:`render_type` cannot
    describe.
    """
    schema = model.model_json_schema()
    required = set(schema.get("required", ()))
    variables: list[VariableDoc] = []
    for field, prop in schema["properties"].items():
        description = prop.get("description")
        if not description:
            raise ValueError(f"{model.__name__}.{field} has no Field(description=...): add one, then run {COMMAND}")
        description += "".join(f" Example: `{example}`." for example in prop.get("examples", ()))
        try:
            type_ = render_type(prop)
        except ValueError as error:
            raise ValueError(f"{model.__name__}.{field}: {error}") from None
        is_required = field in required
        default = "" if is_required else render_default(prop.get("default"))
        variables.append(
            VariableDoc(prefix + field.upper(), type_, description, default, "yes" if is_required else "no")
        )
    return variables


def _cell(text: str) -> str:
    # A table row is one line, and "|" would end the cell.
    return " ".join(text.split()).replace("|", "\\|")


def render_table(variables: Iterable[VariableDoc]) -> str:
    """A Markdown table with the columns variable, type, default, required, description (no trailing newline)."""
    lines = ["| " + " | ".join(_HEADER) + " |", "|" + "---|" * len(_HEADER)]
    for var in variables:
        cells = (f"`{var.name}`", var.type, var.default, var.required, var.description)
        lines.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    return "\n".join(lines)


def render_workload(workload: Workload) -> str:
    """The table of one workload: its model's fields, then its other variables."""
    fields = model_variables(workload.model, workload.prefix) if workload.model is not None else []
    return render_table([*fields, *workload.variables])


def render_doc(text: str, workloads: Iterable[Workload] = WORKLOADS) -> str:
    """``text`` (the document) with each workload's block replaced by its freshly rendered table.

    Raises ``ValueError`` when a workload's block is missing or appears twice, or when the document has a
    block that no workload renders.
    """
    tables = {workload.block: render_workload(workload) for workload in workloads}
    found = [match.group("name") for match in _BLOCK.finditer(text)]
    problems = [f"no block {name!r}" for name in tables if name not in found]
    problems += [f"block {name!r} appears {found.count(name)} times" for name in tables if found.count(name) > 1]
    problems += [f"block {name!r} belongs to no workload" for name in found if name not in tables]
    if problems:
        raise ValueError(
            "; ".join(problems) + " (blocks are <!-- BEGIN GENERATED name --> ... <!-- END GENERATED name -->)"
        )

    def replace(match: re.Match[str]) -> str:
        name = match.group("name")
        return f"<!-- BEGIN GENERATED {name} -->\n{tables[name]}\n<!-- END GENERATED {name} -->"

    return _BLOCK.sub(replace, text)


def main() -> int:
    """Rewrite :data:`DOC` in place; returns the exit code (1 when it cannot be generated, with the reason)."""
    text = DOC.read_text(encoding="utf-8")
    try:
        fresh = render_doc(text)
    except ValueError as error:
        print(f"{DOC}: {error}", file=sys.stderr)
        return 1
    if fresh == text:
        print(f"{DOC}: up to date")
    else:
        DOC.write_text(fresh, encoding="utf-8")
        print(f"{DOC}: regenerated")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
