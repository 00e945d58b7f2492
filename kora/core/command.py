"""Run one ``kora <command>`` function as a Typer command on an argument list: the one place that maps
Typer's ways of ending (help, usage errors, a return code, Ctrl-C) to an exit code; and serve a workload's
app until it is told to stop (:func:`serve_until_stopped`).

Every component's ``cli(argv) -> int`` (dispatched lazily by :mod:`kora.cli`) declares its options as the
parameters of a function returning the exit code (``Annotated[..., typer.Option(...)]``) and hands that
function to :func:`run_command`.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import signal
import socket
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from starlette.types import ASGIApp

    from kora.core.serving import BuildingApp

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_STARTUP_FAILED",
    "run_command",
    "serve_until_stopped",
    "serve_while_building",
    "survive_uvicorn_stop_signal",
]

#: Exit code after Ctrl-C (128 + SIGINT, the shells' convention).
EXIT_INTERRUPTED = 130

#: Exit code when the app's lifespan start-up failed (uvicorn's own for it, ``uvicorn.main.STARTUP_FAILURE``).
EXIT_STARTUP_FAILED = 3


def run_command(command: Callable[..., int], argv: Sequence[str], prog_name: str) -> int:
    """Parse ``argv`` (the arguments after ``kora <command>``) into ``command``'s parameters, call it and
    return its exit code.

    Options and arguments come from ``command``'s signature, the help text from its docstring, and
    ``prog_name`` (``"kora up"``) names the command in usage lines. ``--help`` prints the help and gives 0.
    A usage error (unknown option, a value of the wrong type or out of range, a missing argument) prints
    Typer's message and ``Try 'PROG --help' for help.`` on stderr and gives 2, with no traceback; Ctrl-C
    gives 130. Exceptions the command itself raises propagate. A command without parameters given no arguments
    (``kora agent``, configured by its environment) is called as it is: Typer (~2 MB of RSS held by the server
    for its life, ~40 modules) would only check that there is nothing to parse.
    """
    if not argv and not inspect.signature(command).parameters:
        try:
            return command()
        except KeyboardInterrupt:
            return EXIT_INTERRUPTED
    # Imported here: every caller has paid for Typer already (its option annotations name it), and the rest
    # of kora.core stays cheap to import.
    import typer

    @functools.wraps(command)
    def exit_with_code(*args: object, **kwargs: object) -> None:
        # Standalone mode drops what a command returns; an Exit carries the code out.
        raise typer.Exit(command(*args, **kwargs))

    # Plain Click help, not Rich's boxes: Rich cut lines at 80 columns wherever the output is no terminal (a pipe,
    # a CI log) and showed a <bool> metavar on flags; Click wraps to the width and shows flags bare.
    app = typer.Typer(add_completion=False, rich_markup_mode=None)
    app.command()(exit_with_code)
    try:
        # Standalone mode prints usage errors the usual way and always ends in SystemExit with the code.
        app(args=list(argv), prog_name=prog_name, standalone_mode=True)
    except SystemExit as done:
        return _exit_code(done.code)
    return 0  # pragma: no cover - standalone mode does not return


def _exit_code(code: object) -> int:
    # SystemExit's convention: None is success, an int is the status, anything else is a message and 1.
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def serve_until_stopped(app: ASGIApp, sock: socket.socket, *, lifespan: Literal["on", "off"]) -> None:
    """Serve ``app`` with uvicorn on the bound ``sock`` until SIGINT or SIGTERM, then return (a clean exit 0).

    No access log: it costs more CPU than answering a request. See :func:`survive_uvicorn_stop_signal`.
    """
    import uvicorn

    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan=lifespan)
    survive_uvicorn_stop_signal()
    uvicorn.Server(config).run(sockets=[sock])


def serve_while_building(app: BuildingApp, *, host: str, port: int, log_level: str, access_log: bool) -> None:
    """Serve ``app`` with uvicorn on ``host``:``port`` until SIGINT or SIGTERM, as ``uvicorn.run`` does with these
    options, and stop it as soon as the build or the built app's start-up fails.

    Raises what the build raised (the command reports it: a configuration error, exit 2); exits
    :data:`EXIT_STARTUP_FAILED` when the built app's start-up failed or the server could not start (as
    ``uvicorn.run``). Call :func:`survive_uvicorn_stop_signal` first for the code after it to run on a stop.
    """
    import uvicorn

    from kora.core.errors import AppStartupFailed

    server = uvicorn.Server(
        uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=access_log, lifespan="on")
    )

    def stop() -> None:
        server.should_exit = True

    app.on_failure(stop)
    with contextlib.suppress(KeyboardInterrupt):  # as uvicorn.run: Ctrl-C before its handlers are installed
        server.run()
    if app.error is not None and not isinstance(app.error, AppStartupFailed):
        raise app.error
    if app.error is not None or not server.started:
        sys.exit(EXIT_STARTUP_FAILED)


def survive_uvicorn_stop_signal() -> None:
    """Let the code after ``uvicorn.run`` / ``Server.run`` run when SIGINT or SIGTERM stopped the server.

    uvicorn stops gracefully on either signal and then re-raises it under the handlers installed before it ran;
    with the default ones the process dies right there, before ``finally`` blocks (flushing telemetry) run.
    No-op handlers make the re-raise harmless, so the server's ``run`` returns and the process exits 0.
    """
    for stop_signal in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop_signal, lambda signum, frame: None)
