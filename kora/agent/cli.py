"""``kora agent``: run the agent server with uvicorn, configured from the environment only.

The server listens as soon as the settings are read and checked: ``/health`` answers while the app (FastAPI, its
routes, the telemetry SDK) is imported and built in a thread (:class:`~kora.core.serving.BuildingApp`); requests
made meanwhile wait for it. With the shared task store the app is built first: its database is checked before the
agent serves anything.

Exit codes: 0 after a clean shutdown, 2 when the configuration is invalid (the message names every bad
variable; no traceback) or for an argument (the command takes none), 3 when the app's start-up failed.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING

from kora.agent.settings import load_agent_settings
from kora.core.command import run_command, serve_while_building, survive_uvicorn_stop_signal
from kora.core.imports import modules_absent
from kora.core.serving import BuildingApp, StartupText
from kora.core.settings_errors import SettingsError
from kora.core.telemetry import Telemetry, instrument_app, read_telemetry_config, setup_telemetry

if TYPE_CHECKING:
    from fastapi import FastAPI

    from kora.agent.settings import AgentSettings

# uvicorn imports watchfiles (a Rust extension, ~1.3 MB) whenever installed, for its --reload supervisor; the
# agent serves an app object, which uvicorn never reloads (its fallback, StatReload, is then imported instead).
with modules_absent(("watchfiles",)):
    import uvicorn  # noqa: F401 - imported here, without watchfiles, for serve_while_building to find

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


#: How the agent's app names itself on ``/ready`` and in 503s while it is being built (:class:`BuildingApp`).
BUILDING_TEXT = StartupText(
    subject="The agent", starting="agent app is still being built", failed="agent app failed to start"
)


def _serve() -> int:
    """Run the agent server (all settings come from the environment: see docs/configuration.md)."""
    try:
        settings = load_agent_settings()
        read_telemetry_config(os.environ, "kora agent")  # what setup_telemetry checks first, before /health answers
    except (SettingsError, ValueError) as error:
        return _invalid(error)
    logging.basicConfig(level=settings.agent_log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # One line per outbound request drowns the agent's own log; keep the HTTP clients' warnings only.
    for noisy in ("httpx", "httpx2", "mcp", "fastmcp"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLogger().level))
    installed: list[Telemetry] = []

    def build() -> FastAPI:
        app, telemetry = build_server(settings)
        installed.append(telemetry)
        return app

    identity = {"agent": settings.agent_name}
    if settings.task_store_type == "postgres":
        # The shared task store's database is checked as the app is built: before the agent serves anything.
        try:
            app = build()
        except (SettingsError, ValueError) as error:
            return _invalid(error)
        serving = BuildingApp(lambda: app, BUILDING_TEXT, identity=identity)  # then served the same way
    else:
        # The server listens (/health answers) while the app, its telemetry and its routes are imported and built.
        serving = BuildingApp(build, BUILDING_TEXT, identity=identity)
    survive_uvicorn_stop_signal()
    try:
        serve_while_building(
            serving,
            host=settings.agent_host,
            port=settings.agent_port,
            log_level=settings.agent_log_level.lower(),
            access_log=settings.agent_access_log,
        )
    except (SettingsError, ValueError) as error:
        return _invalid(error)
    finally:
        for telemetry in installed:
            telemetry.shutdown()  # the last spans and metrics of the turns that just ended
    return 0


def _invalid(error: Exception) -> int:
    """Print the configuration ``error`` (no traceback); the exit code 2."""
    print(error if isinstance(error, SettingsError) else f"kora agent: invalid configuration: {error}", file=sys.stderr)
    return 2


def cli(argv: list[str]) -> int:
    """Entry point of ``kora agent`` (no options besides ``--help``); returns the exit code."""
    return run_command(_serve, argv, "kora agent")
