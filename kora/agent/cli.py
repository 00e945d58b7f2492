"""``kora agent``: run the agent server with uvicorn, configured from the environment only.

Exit codes: 0 after a clean shutdown, 2 when the configuration is invalid (the message names every bad
variable; no traceback) or for an argument (the command takes none).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING

from kora.agent.settings import load_agent_settings
from kora.core.command import run_command, survive_uvicorn_stop_signal
from kora.core.imports import modules_absent
from kora.core.settings_errors import SettingsError
from kora.core.telemetry import Telemetry, instrument_app, setup_telemetry

if TYPE_CHECKING:
    from fastapi import FastAPI

    from kora.agent.settings import AgentSettings

# uvicorn imports watchfiles (a Rust extension, ~1.3 MB) whenever installed, for its --reload supervisor; the
# agent serves an app object, which uvicorn never reloads (its fallback, StatReload, is then imported instead).
with modules_absent(("watchfiles",)):
    import uvicorn

#: The instrumentation scope of the a2a-sdk's spans (``a2a.utils.telemetry.INSTRUMENTING_MODULE_NAME``; not
#: imported from there, which would load the SDK before ``/health`` answers).
A2A_SDK_SCOPE = "a2a-python-sdk"


def unused_at_start() -> tuple[str, ...]:
    """Packages the agent's telemetry and app are built without (:func:`build_server`), each imported by a library
    whenever installed and used on a path the agent does not take: ``email_validator`` (FastAPI's OpenAPI models
    validate a contact's e-mail address with it; the agent's document names no contact) and, unless
    ``OTEL_EXPERIMENTAL_RESOURCE_DETECTORS`` asks for resource detectors beyond the SDK's two built-in ones,
    ``psutil`` (~1 MB: only the SDK's opt-in process detector reads it)."""
    if os.environ.get("OTEL_EXPERIMENTAL_RESOURCE_DETECTORS", "").strip(" ,"):
        return ("email_validator",)
    return ("email_validator", "psutil")


def build_server(settings: AgentSettings) -> tuple[FastAPI, Telemetry]:
    """The agent's app for ``settings``, instrumented, and the telemetry installed for this process (what
    ``kora agent`` serves). Raises :class:`~kora.core.settings_errors.SettingsError` or ``ValueError`` when the
    settings cannot be served."""
    # The a2a-sdk traces each of its internal calls as a SERVER span (~50 per message/send): muted unless asked.
    muted = () if settings.agent_a2a_sdk_spans else (A2A_SDK_SCOPE,)
    with modules_absent(unused_at_start()):
        telemetry = setup_telemetry("Agent", settings.agent_name, component="kora agent", muted_scopes=muted)
        from kora.agent.app import create_app

        app = create_app(settings)
        instrument_app(app, telemetry)
    return app, telemetry


def _serve() -> int:
    """Run the agent server (all settings come from the environment: see docs/configuration.md)."""
    try:
        settings = load_agent_settings()
        app, telemetry = build_server(settings)
    except (SettingsError, ValueError) as error:
        print(
            error if isinstance(error, SettingsError) else f"kora agent: invalid configuration: {error}",
            file=sys.stderr,
        )
        return 2
    logging.basicConfig(level=settings.agent_log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # One line per outbound request drowns the agent's own log; keep the HTTP clients' warnings only.
    for noisy in ("httpx", "httpx2", "mcp", "fastmcp"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLogger().level))
    survive_uvicorn_stop_signal()
    try:
        uvicorn.run(
            app,
            host=settings.agent_host,
            port=settings.agent_port,
            log_level=settings.agent_log_level.lower(),
            access_log=settings.agent_access_log,
        )
    finally:
        telemetry.shutdown()  # the last spans and metrics of the turns that just ended
    return 0


def cli(argv: list[str]) -> int:
    """Entry point of ``kora agent`` (no options besides ``--help``); returns the exit code."""
    return run_command(_serve, argv, "kora agent")
