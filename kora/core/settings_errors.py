"""Start-up configuration errors that name every bad setting at once.

Every component loads its settings from the environment with pydantic-settings; when that fails it
raises :class:`SettingsError`, whose message lists each bad variable by its environment-variable name
with the reason, and the CLI prints it and exits non-zero without a traceback.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import ValidationError


class SettingsError(Exception):
    """Invalid or missing settings. ``problems`` holds one ``"VARIABLE: reason"`` line per bad setting."""

    def __init__(self, component: str, problems: Iterable[str]) -> None:
        self.component = component
        self.problems = list(problems)
        lines = "\n".join(f"  - {problem}" for problem in self.problems)
        super().__init__(f"{component}: invalid configuration ({len(self.problems)} problem(s)):\n{lines}")


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
