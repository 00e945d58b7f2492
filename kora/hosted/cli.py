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

from kora.core import env as names
from kora.core.command import run_command, serve_until_stopped
from kora.resources.hosted_models import HostedModel, missing_extra_message, model_path_problem, resolve_hosted_model

__all__ = ["VARIABLES", "cli"]

#: The variables ``kora model-hosted`` reads, as docs/configuration.md lists them.
VARIABLES = (
    names.VariableDoc(
        names.MODEL_HOSTED_MODEL,
        "string",
        "The model to serve: `all-MiniLM-L6-v2` or `sentence-transformers/all-MiniLM-L6-v2` (any case), the "
        "packaged 384-dimension embedding model (needs `pip install 'kora[embeddings]'`), or the exact name of the "
        f"sentence-transformers model in `{names.MODEL_HOSTED_MODEL_PATH}`. Another name without a path: exit 3 "
        "saying Hosted mode does not serve it.",
        required="yes",
    ),
    names.VariableDoc(
        names.MODEL_HOSTED_MODEL_PATH,
        "absolute path",
        f"Directory holding the files of the sentence-transformers model `{names.MODEL_HOSTED_MODEL}` names (as "
        "`SentenceTransformer(name).save(directory)` writes them), read with no network and served under that "
        "name only. Not a directory, or no `modules.json`/`config.json` in it: exit 2 naming this setting.",
        default="unset: the packaged all-MiniLM-L6-v2",
    ),
    names.VariableDoc(
        names.MODEL_HOSTED_THREADS,
        f"int 1..{names.MAX_HOSTED_THREADS}",
        "Intra-op threads the model runtime encodes with. One keeps a short query from waiting on every core "
        "(torch's own default, one per core, is several times slower at p95 on a shared 2-core machine); more "
        "can speed up large batches on an idle machine with cores to spare.",
        default=f"`{names.DEFAULT_HOSTED_THREADS}`",
    ),
    names.VariableDoc(
        names.MODEL_HOSTED_MAX_REQUEST_BYTES,
        f"int >= {names.MIN_MAX_REQUEST_BYTES}",
        "Largest request body accepted, in bytes; a larger one is refused with 413 before it is read "
        "(see Request limits).",
        default=f"`{names.DEFAULT_MAX_LARGE_REQUEST_BYTES}`",
    ),
)

_PROG = "kora model-hosted"


def _say(message: str) -> None:
    print(f"{_PROG}: {message}", file=sys.stderr, flush=True)


def _serve(model: HostedModel, host: str, port: int) -> int:
    from kora.core.net import bind_socket
    from kora.core.settings_errors import SettingsError
    from kora.core.telemetry import instrument_app, setup_telemetry
    from kora.hosted.app import create_hosted_app
    from kora.hosted.embedder import MiniLMEmbedder

    try:
        limit = names.byte_limit(
            os.environ, names.MODEL_HOSTED_MAX_REQUEST_BYTES, names.DEFAULT_MAX_LARGE_REQUEST_BYTES
        )
        threads = names.thread_count(
            os.environ, names.MODEL_HOSTED_THREADS, names.DEFAULT_HOSTED_THREADS, names.MAX_HOSTED_THREADS
        )
        telemetry = setup_telemetry("ModelAPI", component=_PROG)
        sock = bind_socket(host, port)
    except SettingsError as error:
        print(error, file=sys.stderr, flush=True)
        return 2
    except (ValueError, OSError) as error:
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
        max_request_bytes=limit,
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
        name = os.environ.get(names.MODEL_HOSTED_MODEL, "").strip()
        if not name:
            _say(f"{names.MODEL_HOSTED_MODEL} must name the model to serve (e.g. all-MiniLM-L6-v2)")
            return 2
        path = os.environ.get(names.MODEL_HOSTED_MODEL_PATH, "").strip() or None
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
        return _serve(model, host, port)

    return run_command(model_hosted, argv, _PROG)
