"""``kora console``: serve the web console for a ``kora up`` run (configured from the environment:
:mod:`kora.console.settings`). ``kora up`` starts it and serves it at its gateway's root.

Exit codes: 0 after a clean shutdown, 1 when it could not serve (the port is taken), 2 for bad settings (with
``CONSOLE_SOURCE=kubernetes``, no usable Kubernetes credentials too).
"""

from __future__ import annotations

import sys

from kora.core.command import survive_uvicorn_stop_signal
from kora.core.settings_errors import SettingsError

#: Exit code for invalid settings.
EXIT_SETTINGS_ERROR = 2


def cli(argv: list[str]) -> int:
    """``kora console``: serve until stopped; returns the exit code (see the module docstring)."""
    if argv and argv[0] in {"-h", "--help"}:
        print(
            "usage: kora console\n\nServe the web console; settings from CONSOLE_HOST, CONSOLE_PORT, CONSOLE_SOURCE, "
            "CONSOLE_STATE_DIR, CONSOLE_NAMESPACES, CONSOLE_ACCESS_TOKEN, CONSOLE_TRACE_URL (docs/configuration.md)."
        )
        return 0
    if argv:
        print(f"kora console: takes no arguments (got {' '.join(argv)}); see 'kora console --help'", file=sys.stderr)
        return EXIT_SETTINGS_ERROR
    from kora.console.settings import load_console_settings

    try:
        settings = load_console_settings()
    except SettingsError as error:
        print(error, file=sys.stderr)
        return EXIT_SETTINGS_ERROR
    if settings.console_source == "kubernetes":
        from kora.console.cluster import load_kube_config

        try:
            load_kube_config()
        except ValueError as error:
            print(f"kora console: CONSOLE_SOURCE=kubernetes: {error}", file=sys.stderr)
            return EXIT_SETTINGS_ERROR
    import uvicorn

    from kora.console.app import create_app

    config = uvicorn.Config(
        create_app(settings),
        host=settings.console_host,
        port=settings.console_port,
        log_level="warning",
        access_log=False,
        lifespan="on",
    )
    server = uvicorn.Server(config)
    survive_uvicorn_stop_signal()
    server.run()
    return 0 if server.started else 1
