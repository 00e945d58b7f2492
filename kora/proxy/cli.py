"""``kora model-proxy``: a ModelAPI in Proxy mode, forwarding ``/v1`` to ``MODEL_PROXY_API_BASE``
(:mod:`kora.proxy.model_proxy`).

    kora model-proxy [--host 127.0.0.1] [--port 8000]

Exit codes: 0 after SIGINT/SIGTERM; 2 for bad settings, an address in use or a bad option.
"""

# No ``from __future__ import annotations`` here: Typer reads the option annotations at run time.
import sys
from typing import Annotated

from kora.core.command import run_command, serve_until_stopped
from kora.proxy.model_proxy import COMPONENT, create_proxy_app, load_proxy_settings


def _serve(host: str, port: int) -> int:
    """Serve the proxy on ``host:port`` until SIGINT/SIGTERM; 0, or 2 after saying what is wrong."""
    from kora.core.net import bind_socket
    from kora.core.settings_errors import SettingsError
    from kora.core.telemetry import instrument_app, setup_telemetry

    try:
        settings = load_proxy_settings()
        telemetry = setup_telemetry("ModelAPI", component=COMPONENT)
        sock = bind_socket(host, port)
    except SettingsError as error:
        print(error, file=sys.stderr)
        return 2
    except OSError as error:
        print(f"{COMPONENT}: {error}", file=sys.stderr)
        return 2
    print(f"{COMPONENT}: forwarding /v1 to {settings.api_base} on port {sock.getsockname()[1]}", flush=True)
    app = create_proxy_app(settings)
    instrument_app(app, telemetry)
    try:
        serve_until_stopped(app, sock, lifespan="on")
    finally:
        telemetry.shutdown()
    return 0


def cli(argv: list[str]) -> int:
    """``kora model-proxy [--host H] [--port P]``: serve until SIGINT/SIGTERM; returns the exit code."""
    import typer

    def model_proxy(
        host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
        port: Annotated[int, typer.Option(help="TCP port (0: any free port).", min=0, max=65535)] = 8000,
    ) -> int:
        """Forward /v1/* to MODEL_PROXY_API_BASE (a ModelAPI in Proxy mode)."""
        return _serve(host, port)

    return run_command(model_proxy, argv, "kora model-proxy")
