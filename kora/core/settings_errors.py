"""Start-up configuration: reading settings from the environment alike in every component, and errors that
name every bad setting at once.

Every component loads its settings from the environment with pydantic-settings; when that fails it
raises :class:`SettingsError`, whose message lists each bad variable by its environment-variable name
with the reason, and the CLI prints it and exits non-zero without a traceback.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pydantic import ValidationError

from kora.core.errors import SettingsError

# SettingsError is defined with every other exception class in kora.core.errors; components import it from here.
__all__ = ["SettingsError", "describe_validation_error", "settings_fields"]


def describe_validation_error(error: ValidationError, env_prefix: str = "") -> list[str]:
    """Turn a pydantic-settings ``ValidationError`` into ``"ENV_VAR: reason"`` lines, one per field."""
    problems = []
    for item in error.errors(include_url=False):
        field = str(item["loc"][0]) if item["loc"] else "?"
        variable = (env_prefix + field).upper()
        if item["type"] == "missing":
            problems.append(f"{variable}: required but not set")
            continue
        value = item.get("input")
        shown = f" (got {value!r})" if isinstance(value, str | int | float | bool) else ""
        problems.append(f"{variable}: {item['msg']}{shown}")
    return problems


def settings_fields(environ: Mapping[str, str], fields: Iterable[str], env_prefix: str = "") -> dict[str, str]:
    """The values of ``environ`` for settings ``fields`` (lower-case field names; the variable is
    ``env_prefix`` + the name, any case), as every component reads them: a one-line value has its surrounding
    whitespace trimmed (``MEMORY_ENABLED=" true"`` is ``true``; multi-line text such as tool source is kept as
    it is), and a variable that is set but empty or blank counts as unset (``MEMORY_TOOLS=""`` gives the
    default), as in a manifest an empty value means "not configured"."""
    wanted = set(fields)
    prefix = env_prefix.lower()
    found: dict[str, str] = {}
    for key, value in environ.items():
        name = key.lower()
        if not name.startswith(prefix) or name[len(prefix) :] not in wanted:
            continue
        if value.strip():
            found[name[len(prefix) :]] = value if "\n" in value.strip() else value.strip()
    return found
