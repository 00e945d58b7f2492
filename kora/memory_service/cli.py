"""``kora memory``: run the memory service, the MemoryStore workload (docs/memory.md).

    kora memory [--host H] [--port N]

Every other setting comes from ``MEMORY_SERVICE_*`` variables (:mod:`kora.memory_service.settings`). Exit codes:
0 after a clean shutdown, 2 for bad settings or options (one message naming each bad variable, no traceback).
"""

# No ``from __future__ import annotations``: Typer evaluates the option annotations, which name the ``typer``
# imported inside ``cli`` (imported there to keep ``kora`` start-up light).
import logging
import sys
from typing import Annotated

from kora.core.command import run_command, survive_uvicorn_stop_signal
from kora.core.settings_errors import SettingsError

#: Exit code for invalid settings or options.
EXIT_SETTINGS_ERROR = 2


def serve(host: str, port: int) -> int:
    """Load the settings, build the app and serve it on ``host:port`` until stopped; returns the exit code."""
    from kora.core.telemetry import instrument_app, setup_telemetry
    from kora.memory_service.settings import load_memory_service_settings

    try:
        settings = load_memory_service_settings()
        telemetry = setup_telemetry("MemoryStore", component="kora memory")
    except SettingsError as error:
        print(error, file=sys.stderr)
        return EXIT_SETTINGS_ERROR
    logging.basicConfig(
        level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    for noisy in ("httpx", "psycopg.pool"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLogger().level))
    import uvicorn

    from kora.memory_service.app import create_app

    app = create_app(settings)
    instrument_app(app, telemetry)
    survive_uvicorn_stop_signal()
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
    finally:
        telemetry.shutdown()
    return 0


def cli(argv: list[str]) -> int:
    """Parse ``kora memory`` options with Typer and run :func:`serve`; returns the exit code (2 for bad options)."""
    import typer

    def memory(
        host: Annotated[str, typer.Option(help="Interface to bind.")] = "0.0.0.0",
        port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8000,
    ) -> int:
        """Run the memory service (settings from MEMORY_SERVICE_* variables)."""
        return serve(host, port)

    return run_command(memory, argv, "kora memory")
