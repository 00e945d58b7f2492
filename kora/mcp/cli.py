"""``kora mcp``: run the python-runtime MCP tool server (docs/mcp.md).

    kora mcp [--host H] [--port N] [--tools-file PATH | --package NAME[:ATTR]]

Without options the tools come from ``MCP_TOOLS_STRING`` (or ``MCP_TOOLS_FILE`` / ``MCP_PACKAGE``); see
:mod:`kora.mcp.settings` for every setting. Exit codes: 0 after a clean shutdown, 1 when the tools cannot
be served (bad source, missing package; the message names the line or the package), 2 for bad settings
or options. Start-up problems print one message and no traceback.
"""

# No ``from __future__ import annotations`` here: Typer evaluates the option annotations, which name the
# ``typer`` imported inside ``cli`` (imported there to keep ``kora`` start-up light).
import logging
import sys
from pathlib import Path
from typing import Annotated

from kora.core.command import run_command, survive_uvicorn_stop_signal
from kora.core.settings_errors import SettingsError

#: Exit code when the tools cannot be served.
EXIT_TOOLS_ERROR = 1
#: Exit code for invalid settings or options.
EXIT_SETTINGS_ERROR = 2


def serve(
    host: str | None = None, port: int | None = None, tools_file: Path | None = None, package: str | None = None
) -> int:
    """Load settings (options win over the environment), build the app and serve it until stopped.

    Returns the exit code; prints start-up problems to stderr instead of raising.
    """
    from kora.mcp.settings import load_mcp_settings

    try:
        settings = load_mcp_settings(mcp_host=host, mcp_port=port, mcp_tools_file=tools_file, mcp_package=package)
    except SettingsError as exc:
        print(exc, file=sys.stderr)
        return EXIT_SETTINGS_ERROR
    # Configure logging before the SDK does (it installs its own handler when the root logger has none).
    logging.basicConfig(
        level=settings.mcp_log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    # Imported here: `kora mcp --help` and settings errors should not pay for FastAPI and the MCP SDK.
    from kora.core.errors import PackageError, ToolSourceError
    from kora.core.telemetry import instrument_app, setup_telemetry
    from kora.mcp.app import create_app

    try:
        # The resource's name comes from the wiring (OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME).
        telemetry = setup_telemetry("MCPServer", component="kora mcp")
        app = create_app(settings)
        instrument_app(app, telemetry)
    except SettingsError as exc:
        print(exc, file=sys.stderr)
        return EXIT_SETTINGS_ERROR
    except (ToolSourceError, PackageError) as exc:
        print(f"kora mcp: {exc}", file=sys.stderr)
        return EXIT_TOOLS_ERROR

    import uvicorn

    config = uvicorn.Config(
        app,
        host=settings.mcp_host,
        port=settings.mcp_port,
        log_level=settings.mcp_log_level.lower(),
        access_log=settings.mcp_access_log,
        lifespan="on",
    )
    server = uvicorn.Server(config)
    survive_uvicorn_stop_signal()
    try:
        server.run()
    finally:
        telemetry.shutdown()
    return 0 if server.started else EXIT_TOOLS_ERROR


def cli(argv: list[str]) -> int:
    """Parse ``kora mcp`` options with Typer and run :func:`serve`; returns the exit code (2 for bad options)."""
    import typer

    def mcp(
        host: Annotated[str | None, typer.Option(help="Interface to bind (env MCP_HOST, default 0.0.0.0).")] = None,
        port: Annotated[int | None, typer.Option(help="Port (env MCP_PORT, default 8000).")] = None,
        tools_file: Annotated[
            Path | None, typer.Option(help="File with the tools source (env MCP_TOOLS_FILE), not MCP_TOOLS_STRING.")
        ] = None,
        package: Annotated[
            str | None, typer.Option(help="Serve this package's MCP server, NAME or NAME:ATTR (env MCP_PACKAGE).")
        ] = None,
    ) -> int:
        """Run the python-runtime MCP tool server."""
        return serve(host=host, port=port, tools_file=tools_file, package=package)

    return run_command(mcp, argv, "kora mcp")
