"""Settings of the web console, read from the environment (``CONSOLE_HOST``, ``CONSOLE_PORT``,
``CONSOLE_STATE_DIR``). :func:`load_console_settings` raises :class:`~kora.core.settings_errors.SettingsError`
naming every bad variable."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from kora.core.serving.settings import load_settings

COMPONENT = "kora console"


class ConsoleSettings(BaseSettings):
    """Where the console listens and which ``kora up`` run it shows.

    Each field's ``description`` is its row in docs/configuration.md (``python scripts/gen_config_docs.py``).
    """

    model_config = SettingsConfigDict(case_sensitive=False, extra="ignore", frozen=True)

    console_host: str = Field(default="127.0.0.1", description="Interface to bind.")
    console_port: int = Field(default=8090, ge=1, le=65535, description="Port to listen on.")
    console_state_dir: Path = Field(
        default=Path(".kora"),
        description="The state directory of the `kora up` run to show: its `state.json` (the workloads, their "
        "phases and URLs) and `credentials.json` (the operator tokens the console reads sessions and memory "
        "with). `kora up` sets it.",
    )


def load_console_settings(environ: Mapping[str, str] | None = None, **overrides: Any) -> ConsoleSettings:
    """The console's settings from ``environ`` (default: the process environment), ``overrides`` winning."""
    return load_settings(ConsoleSettings, COMPONENT, environ, overrides=overrides)
