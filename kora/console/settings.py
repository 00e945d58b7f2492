"""Settings of the web console, read from the environment (``CONSOLE_HOST``, ``CONSOLE_PORT``,
``CONSOLE_SOURCE``, ``CONSOLE_STATE_DIR``, ``CONSOLE_NAMESPACES``, ``CONSOLE_ACCESS_TOKEN``,
``CONSOLE_TRACE_URL``).
:func:`load_console_settings` raises :class:`~kora.core.settings_errors.SettingsError` naming every bad
variable."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator

from kora.core.serving import load_settings
from kora.core.settings_model import WorkloadSettings
from kora.core.trace_links import check_trace_url

COMPONENT = "kora console"


class ConsoleSettings(WorkloadSettings):
    """Where the console listens and which ``kora up`` run it shows.

    Each field's ``description`` is its row in docs/configuration.md (``python scripts/gen_config_docs.py``).
    """

    console_host: str = Field(default="127.0.0.1", description="Interface to bind.")
    console_port: int = Field(default=8090, ge=1, le=65535, description="Port to listen on.")
    console_state_dir: Path = Field(
        default=Path(".kora"),
        description="The state directory of the `kora up` run to show: its `state.json` (the workloads, their "
        "phases and URLs) and `credentials.json` (the operator tokens the console reads sessions and memory "
        "with). `kora up` sets it. Read with `CONSOLE_SOURCE=local` only.",
    )
    console_source: Literal["local", "kubernetes"] = Field(
        default="local",
        description="Where the resources come from: `local`, the `kora up` run of `CONSOLE_STATE_DIR`; "
        "`kubernetes`, the Kora resources of the cluster (read-only: their spec and status), with each resource's "
        "operator token read from the credentials Secret the operator made for it (the pod's service account, or "
        "`KUBECONFIG` outside a cluster).",
    )
    console_namespaces: str = Field(
        default="",
        description="With `CONSOLE_SOURCE=kubernetes`: the namespaces to show, comma-separated; empty: every "
        "namespace.",
    )
    console_access_token: SecretStr | None = Field(
        default=None,
        description="A credential every page and route of the console but `/health` and `/ready` asks for: as "
        "the password of HTTP Basic authentication (any user name; a browser asks for it) or as a bearer token. "
        "Unset: no credential is asked for, so the console must be reachable only by those who may read every "
        "session (`kora up`'s loopback gateway, `kubectl port-forward`). The Helm chart sets it from a Secret and "
        "requires it before it routes the console on the Gateway.",
    )

    console_trace_url: str | None = Field(
        default=None,
        description="A trace viewer's URL for one trace, with `{trace_id}` where the trace id goes (e.g. "
        "`http://localhost:16686/trace/{trace_id}` for Jaeger): each turn's trace id the console shows links there "
        "(in a new tab). An http(s) URL; unset: trace ids are plain text. `kora up --trace-url` sets it.",
    )

    @field_validator("console_trace_url")
    @classmethod
    def _trace_url(cls, value: str | None) -> str | None:
        return None if value is None else check_trace_url(value)

    @property
    def namespaces(self) -> list[str]:
        """``CONSOLE_NAMESPACES`` as a list (empty: every namespace)."""
        return [name.strip() for name in self.console_namespaces.split(",") if name.strip()]


def load_console_settings(environ: Mapping[str, str] | None = None, **overrides: Any) -> ConsoleSettings:
    """The console's settings from ``environ`` (default: the process environment), ``overrides`` winning."""
    return load_settings(ConsoleSettings, COMPONENT, environ, overrides=overrides)
