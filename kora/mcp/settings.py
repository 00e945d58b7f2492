"""Settings of the MCP tool server, read from the environment (docs/configuration.md "Tool server").

Each setting is read from the upper-case form of its field name (``mcp_port`` <- ``MCP_PORT``); the
``kora mcp`` options override them. Exactly one source of tools must be given:

- ``MCP_TOOLS_STRING``: the MCPServer's ``spec.config.toolsString`` (inline tools, stdlib only), or
- ``MCP_TOOLS_FILE`` / ``--tools-file``: a file holding the same kind of source, or
- ``MCP_PACKAGE`` / ``--package``: the ``mcp`` option, an installed package that implements MCP.

:func:`load_mcp_settings` validates everything at once and raises
:class:`~kora.core.settings_errors.SettingsError` naming every bad variable.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from kora.core.env import DEFAULT_MAX_REQUEST_BYTES
from kora.core.serving import load_settings, request_limit_field
from kora.core.settings_errors import SettingsError
from kora.core.settings_model import WorkloadSettings
from kora.mcp.origin import DEFAULT_ALLOWED_ORIGINS, parse_allowed_origins

COMPONENT = "kora mcp"
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]


def parse_tool_timeouts(value: str) -> dict[str, float]:
    """Parse ``MCP_TOOL_TIMEOUTS``: comma-separated ``tool=seconds`` -> ``{tool: seconds}``.

    ``"slow_report=120, ping=2"`` -> ``{"slow_report": 120.0, "ping": 2.0}``. Raises ``ValueError``
    naming each malformed entry (seconds must be a positive number).
    """
    result: dict[str, float] = {}
    bad: list[str] = []
    for entry in (part.strip() for part in value.split(",")):
        if not entry:
            continue
        name, sep, seconds = entry.partition("=")
        try:
            parsed = float(seconds)
        except ValueError:
            parsed = 0.0
        if not sep or not name.strip() or not parsed > 0:
            bad.append(entry)
            continue
        result[name.strip()] = parsed
    if bad:
        raise ValueError(f"entries must be 'tool=seconds' with seconds > 0, got {', '.join(repr(b) for b in bad)}")
    return result


class McpSettings(WorkloadSettings):
    """Settings of one tool server. Exactly one of ``mcp_tools_string``, ``mcp_tools_file``, ``mcp_package``.

    Each field's ``description`` is its row in docs/configuration.md (``python scripts/gen_config_docs.py``).
    """

    # Where the tools come from (exactly one).
    mcp_tools_string: str = Field(
        default="", description="Inline tools: Python source, standard library only (`spec.config.toolsString`)."
    )
    mcp_tools_file: Path | None = Field(
        default=None, description="A file holding inline tools source; `--tools-file` overrides it."
    )
    mcp_package: str = Field(
        default="",
        description="The `mcp` option: an installed package that implements MCP, `NAME` or `NAME:ATTR`; "
        "`--package` overrides it.",
    )
    # Serving.
    mcp_host: str = Field(default="0.0.0.0", description="Interface to bind; `--host` overrides it.")
    mcp_port: int = Field(default=8000, ge=1, le=65535, description="Port to listen on; `--port` overrides it.")
    mcp_log_level: LogLevel = Field(default="INFO", description="Log level (any case).")
    mcp_access_log: bool = Field(default=False, description="Write uvicorn's access log (a line per request).")
    mcp_max_request_bytes: int = request_limit_field(DEFAULT_MAX_REQUEST_BYTES)
    mcp_stateless_http: bool = Field(
        default=True,
        description="Serve MCP without sessions, so any replica behind a Service can answer any request.",
    )
    mcp_allowed_origins: str = Field(
        default=DEFAULT_ALLOWED_ORIGINS,
        description="Origins a request that sends an `Origin` header may come from (comma-separated "
        "`scheme://host[:port]`, `scheme://host:*` for any port, `*` for all); other origins are refused with 403 "
        "(DNS rebinding). Requests without `Origin` are not affected.",
    )
    mcp_server_name: str = Field(
        default="kora-tools",
        min_length=1,
        description="Name the server reports in the MCP `initialize` result (inline tools).",
    )
    # Running inline tools.
    mcp_tool_timeout_seconds: float = Field(
        default=30.0, gt=0, description="Seconds one tool call may run before it is stopped and reported as an error."
    )
    mcp_tool_timeouts: str = Field(
        default="",
        description="Per-tool overrides of the timeout: comma-separated `tool=seconds` entries.",
        examples=["slow_report=120,ping=2"],
    )
    mcp_tool_workers: int = Field(
        default=4, ge=1, le=256, description="Worker processes, i.e. how many tool calls run at the same time."
    )

    @field_validator("mcp_tool_timeouts")
    @classmethod
    def _timeouts_well_formed(cls, value: str) -> str:
        parse_tool_timeouts(value)
        return value

    @field_validator("mcp_allowed_origins")
    @classmethod
    def _origins_well_formed(cls, value: str) -> str:
        parse_allowed_origins(value)
        return value

    @field_validator("mcp_log_level", mode="before")
    @classmethod
    def _upper_log_level(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    @field_validator("mcp_package")
    @classmethod
    def _package_is_a_module_path(cls, value: str) -> str:
        value = value.strip()
        module, _, attribute = value.partition(":")
        parts = module.split(".") if module else []
        if value and (not all(part.isidentifier() for part in parts) or (attribute and not attribute.isidentifier())):
            raise ValueError("must be an importable module name, optionally with ':attribute'")
        return value

    def timeout_for(self, tool: str) -> float:
        """Seconds ``tool`` may run: its ``MCP_TOOL_TIMEOUTS`` entry, else ``MCP_TOOL_TIMEOUT_SECONDS``."""
        return parse_tool_timeouts(self.mcp_tool_timeouts).get(tool, self.mcp_tool_timeout_seconds)

    def tools_source(self) -> tuple[str, str]:
        """``(source, filename)`` of the inline tools. Raises ``SettingsError`` if the file cannot be read."""
        if self.mcp_tools_file is None:
            return self.mcp_tools_string, "<toolsString>"
        try:
            return self.mcp_tools_file.read_text(encoding="utf-8"), str(self.mcp_tools_file)
        except (OSError, UnicodeDecodeError) as exc:
            raise SettingsError(COMPONENT, [f"MCP_TOOLS_FILE: cannot read {self.mcp_tools_file}: {exc}"]) from None


def load_mcp_settings(environ: Mapping[str, str] | None = None, **overrides: Any) -> McpSettings:
    """Read and validate the tool server's settings from ``environ`` (default: the process environment).

    ``overrides`` (field name -> value; ``None`` means "not given") win over the environment; the CLI
    passes its options here. Raises ``SettingsError`` listing every bad variable, including "no tools
    given" and "more than one source of tools given".
    """
    settings = load_settings(McpSettings, COMPONENT, environ, overrides=overrides)
    given = [
        name
        for name, present in (
            ("MCP_TOOLS_STRING", bool(settings.mcp_tools_string.strip())),
            ("MCP_TOOLS_FILE", settings.mcp_tools_file is not None),
            ("MCP_PACKAGE", bool(settings.mcp_package)),
        )
        if present
    ]
    if not given:
        raise SettingsError(
            COMPONENT,
            ["MCP_TOOLS_STRING: required (the tools source), unless MCP_TOOLS_FILE or MCP_PACKAGE is set"],
        )
    if len(given) > 1:
        raise SettingsError(COMPONENT, [f"{' and '.join(given)}: set only one source of tools"])
    return settings
