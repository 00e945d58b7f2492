"""``kora model-hosted``: a ModelAPI in Hosted mode, serving the model named by ``MODEL_HOSTED_MODEL``.

    kora model-hosted [--host 127.0.0.1] [--port 8000]

Serves the packaged embedding model all-MiniLM-L6-v2 (``MODEL_HOSTED_MODEL``: ``all-MiniLM-L6-v2`` or
``sentence-transformers/all-MiniLM-L6-v2``), or the sentence-transformers model ``MODEL_HOSTED_MODEL`` names
exactly from the directory ``MODEL_HOSTED_MODEL_PATH`` (a local copy of its files; never the network), with the
routes of :mod:`kora.hosted.app`; ``/health`` answers at once and ``/ready`` once the model has loaded (a few
seconds). Exit codes: 0 after SIGINT/SIGTERM; 1 when the model fails to load (the reason is printed); 2 for a
missing ``MODEL_HOSTED_MODEL``, a ``MODEL_HOSTED_MODEL_PATH`` that holds no model, an address in use or a bad
option; 3 when Hosted mode cannot serve the model here: another model than the packaged one without a path, or
the ``embeddings`` extra not installed (the message gives the pip command).
"""

# No ``from __future__ import annotations`` here: Typer reads the option annotations at run time.
import os
import signal
import sys
from typing import Annotated

from kora.core.command import run_command, serve_until_stopped
from kora.hosted.settings import COMPONENT, HostedSettings, load_hosted_settings
from kora.resources import HostedModel, missing_extra_message, model_path_problem, resolve_hosted_model

__all__ = ["cli"]

_PROG = COMPONENT


def _say(message: str) -> None:
    print(f"{_PROG}: {message}", file=sys.stderr, flush=True)


def _serve(model: HostedModel, settings: HostedSettings, host: str, port: int) -> int:
    from kora.core.net import bind_socket
    from kora.core.settings_errors import SettingsError
    from kora.core.telemetry import instrument_app, setup_telemetry
    from kora.hosted.app import create_hosted_app
    from kora.hosted.embedder import MiniLMEmbedder

    threads = settings.threads
    try:
        telemetry = setup_telemetry("ModelAPI", component=_PROG)
        sock = bind_socket(host, port)
    except SettingsError as error:
        print(error, file=sys.stderr, flush=True)
        return 2
    except OSError as error:
        _say(str(error))
        return 2
    failures: list[str] = []

    def loaded(seconds: float) -> None:
        print(f"{_PROG}: {model.short_name} loaded in {seconds:.1f} s; ready", flush=True)

    def failed(reason: str) -> None:
        failures.append(reason)
        _say(f"cannot load {model.short_name}: {reason}")
        # A model that cannot load will not load on its own later: stop the way SIGTERM does, and exit 1 so
        # the runner (kubelet, kora up) shows the failure and restarts with back-off.
        os.kill(os.getpid(), signal.SIGTERM)

    app = create_hosted_app(
        model,
        lambda: MiniLMEmbedder.load(threads, model.path),
        on_loaded=loaded,
        on_load_failure=failed,
        max_request_bytes=settings.max_request_bytes,
    )
    instrument_app(app, telemetry)
    print(
        f"{_PROG}: serving {model.name} on port {sock.getsockname()[1]} with {threads} thread(s); loading the model",
        flush=True,
    )
    try:
        serve_until_stopped(app, sock, lifespan="on")
    finally:
        telemetry.shutdown()
    return 1 if failures else 0


def cli(argv: list[str]) -> int:
    """``kora model-hosted [--host H] [--port P]``: serve ``MODEL_HOSTED_MODEL`` until SIGINT/SIGTERM; returns
    the exit code."""
    import typer

    def model_hosted(
        host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
        port: Annotated[int, typer.Option(help="TCP port (0: any free port).", min=0, max=65535)] = 8000,
    ) -> int:
        """Serve the model named by MODEL_HOSTED_MODEL (a ModelAPI in Hosted mode): all-MiniLM-L6-v2 embeddings,
        or the sentence-transformers model in MODEL_HOSTED_MODEL_PATH."""
        from kora.core.settings_errors import SettingsError

        try:
            settings = load_hosted_settings()
        except SettingsError as error:
            print(error, file=sys.stderr, flush=True)
            return 2
        name, path = settings.model, settings.model_path
        model = resolve_hosted_model(name, path)
        if isinstance(model, str):
            _say(model)
            return 3
        if path is not None:
            problem = model_path_problem(path)
            if problem is not None:
                _say(problem)
                return 2
        missing = missing_extra_message(model)
        if missing is not None:
            _say(missing)
            return 3
        return _serve(model, settings, host, port)

    return run_command(model_hosted, argv, _PROG)
