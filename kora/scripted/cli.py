"""``kora model``: run the scripted OpenAI-compatible model server (tests, offline demo).

    kora model [--host 127.0.0.1] [--port 8000] [--script FILE] [--model-name NAME] [--max-recorded N]
               [--embedding-dimensions 384] [--max-request-bytes 16777216]

Prints one line on start-up saying that this is a scripted offline model and the base URL it serves
(``http://HOST:PORT/v1``; with ``--port 0`` the port the OS chose). Exit codes: 0 after a clean stop
(SIGINT/SIGTERM), 2 for bad arguments, an unreadable script or an address already in use.
"""

# No ``from __future__ import annotations`` here: Typer reads the option annotations at run time, and
# they name ``typer``, which is imported inside ``cli`` to keep ``kora --help`` fast.
import sys
from pathlib import Path
from typing import Annotated

from kora.core.command import run_command, serve_until_stopped

__all__ = ["cli"]


def _serve(
    host: str,
    port: int,
    script: Path | None,
    model_name: str,
    max_recorded: int,
    embedding_dimensions: int,
    max_request_bytes: int,
) -> int:
    from kora.core.net import bind_socket
    from kora.scripted.model import ScriptedModel, ScriptError, create_app, load_script_file

    try:
        rules = load_script_file(script) if script is not None else []
    except (OSError, ScriptError) as exc:
        print(f"kora model: cannot load script: {exc}", file=sys.stderr)
        return 2
    try:
        sock = bind_socket(host, port)
    except OSError as exc:
        print(f"kora model: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
        return 2
    model = ScriptedModel(
        rules, model_name=model_name, max_recorded=max_recorded or None, embedding_dimensions=embedding_dimensions
    )
    bound_port = sock.getsockname()[1]
    shown_host = f"[{host}]" if ":" in host else host
    print(
        f"kora model: scripted offline model {model_name!r} (not a real LLM; {len(rules)} rules) "
        f"listening on http://{shown_host}:{bound_port}/v1",
        flush=True,
    )
    serve_until_stopped(create_app(model, max_request_bytes), sock, lifespan="off")
    return 0


def cli(argv: list[str]) -> int:
    """Parse ``argv`` (the arguments after ``kora model``), serve until stopped; returns the exit code."""
    import typer

    from kora.core.env import DEFAULT_MAX_LARGE_REQUEST_BYTES, MIN_MAX_REQUEST_BYTES
    from kora.scripted.embedding import DEFAULT_DIMENSIONS, MAX_DIMENSIONS

    def model(
        host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
        port: Annotated[int, typer.Option(help="TCP port (0: any free port).", min=0, max=65535)] = 8000,
        script: Annotated[
            Path | None, typer.Option(help="YAML or JSON script of rules (format: kora.scripted.model).")
        ] = None,
        model_name: Annotated[str, typer.Option(help="Model name listed by /v1/models.")] = "scripted",
        max_recorded: Annotated[
            int, typer.Option(help="Keep at most this many recorded requests (0: unbounded).", min=0)
        ] = 10000,
        embedding_dimensions: Annotated[
            int,
            typer.Option(
                help="Length of /v1/embeddings vectors when a request gives no 'dimensions'.",
                min=1,
                max=MAX_DIMENSIONS,
            ),
        ] = DEFAULT_DIMENSIONS,
        max_request_bytes: Annotated[
            int,
            typer.Option(help="Largest request body accepted, in bytes (413 beyond it).", min=MIN_MAX_REQUEST_BYTES),
        ] = DEFAULT_MAX_LARGE_REQUEST_BYTES,
    ) -> int:
        """Run the scripted OpenAI-compatible model server (offline stand-in for an LLM)."""
        return _serve(host, port, script, model_name, max_recorded, embedding_dimensions, max_request_bytes)

    return run_command(model, argv, "kora model")
