"""``kora up | status | logs | down | chat | token``: the local runtime's commands.

``kora up`` is :func:`kora.local.up.up` (imported when it runs, so the other commands do not load it); the others
are the user's side of a running ``kora up`` (via its state file).

Every command takes ``--state-dir``; without it the run is found by :func:`kora.local.state.locate` (``.kora``
or ``.kora/*/``, the one alive). Exit codes: 0 on success; 1 when no ``kora up`` ever ran there, when
several run and none was named, or (``status``, ``down``, ``chat``) when none is running now; 2 for bad
arguments or an unknown workload name.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import Annotated, TextIO

import typer

from kora.core.command import run_command
from kora.core.protocol import APPROVAL_FIELD
from kora.local.credentials import read_credentials
from kora.local.state import Located, UpState, WorkloadState, locate, process_alive, read_state, render_table
from kora.resources import ADMIN_TOKEN_KEY, Kind, ResourceRef, credentials_secret

__all__ = ["chat_cli", "down_cli", "logs_cli", "status_cli", "token_cli", "up_cli"]


#: ``--state-dir``, which every command takes (default: found, see :func:`kora.local.state.locate`).
_StateDir = Annotated[
    Path | None, typer.Option(help="State dir of kora up (default: the running one in .kora or .kora/*/).")
]


def _load(prog: str, state_dir: Path | None) -> Located | None:
    try:
        return locate(state_dir)
    except (FileNotFoundError, ValueError) as error:
        print(f"{prog}: {error.args[0] if error.args else error}", file=sys.stderr)
    return None


def _not_running(prog: str, located: Located) -> str:
    last = f"the last kora up, pid {located.state.pid}, state dir {located.state_dir}, has stopped"
    return f"{prog}: nothing runs ({last})"


def _find(prog: str, state_dir: Path | None, name: str) -> tuple[Located, WorkloadState] | int:
    """The run and the workload called ``name``, or the exit code after saying why not (1: no state, 2: no
    such workload)."""
    located = _load(prog, state_dir)
    if located is None:
        return 1
    try:
        return located, located.state.workload(name)
    except KeyError as error:
        print(f"{prog}: {error.args[0]}", file=sys.stderr)
        return 2


def _status(state_dir: _StateDir = None) -> int:
    """Show what kora up runs where."""
    located = _load("kora status", state_dir)
    if located is None:
        return 1
    state = located.state
    if not state.running:
        # Its phases are the last the supervisor wrote: showing them would claim a stopped run is Ready.
        print(_not_running("kora status", located), file=sys.stderr)
        print(render_table(state.as_stopped()))
        return 1
    print(f"kora up (pid {state.pid}) running; gateway {state.gateway_url}; state dir {located.state_dir}")
    print(render_table(state))
    restarted = [f"{w.name} x{w.restarts}" for w in state.workloads if w.restarts]
    if restarted:
        print("restarts: " + ", ".join(restarted))
    return 0


def status_cli(argv: list[str]) -> int:
    """``kora status``: the workload table (phases, gateway and direct URLs, restarts) of the last ``kora up``."""
    return run_command(_status, argv, "kora status")


def _follow(path: Path, out: TextIO, state: UpState, follow: bool) -> None:
    with open(path, encoding="utf-8", errors="replace") as log:
        out.write(log.read())
        out.flush()
        while follow and state.running:
            line = log.readline()
            if line:
                out.write(line)
                out.flush()
            else:
                time.sleep(0.2)


def _logs(
    name: Annotated[str, typer.Argument(help="Workload name (or Kind/name when two kinds share it).")],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines.")] = False,
    state_dir: _StateDir = None,
) -> int:
    """Print a workload's log."""
    found = _find("kora logs", state_dir, name)
    if isinstance(found, int):
        return found
    located, workload = found
    state = located.state
    path = Path(workload.log)
    if not path.exists():
        print(f"kora logs: {workload.kind}/{workload.name} has not started yet ({workload.message})", file=sys.stderr)
        return 1
    with contextlib.suppress(KeyboardInterrupt):
        _follow(path, sys.stdout, state, follow)
    return 0


def logs_cli(argv: list[str]) -> int:
    """``kora logs NAME [-f]``: print a workload's log (stdout and stderr of every run); ``-f`` follows it
    until Ctrl-C or until ``kora up`` stops."""
    return run_command(_logs, argv, "kora logs")


def _token(
    name: Annotated[str, typer.Argument(help="An Agent or MemoryStore (or Kind/name when two kinds share it).")],
    state_dir: _StateDir = None,
) -> int:
    """Print the operator's bearer token of an Agent (AGENT_ADMIN_TOKEN) or MemoryStore
    (MEMORY_SERVICE_ADMIN_TOKEN)."""
    found = _find("kora token", state_dir, name)
    if isinstance(found, int):
        return found
    located, workload = found
    ref = ResourceRef(workload.kind, workload.namespace, workload.name)
    if workload.kind not in {Kind.AGENT.value, Kind.MEMORY_STORE.value}:
        print(
            f"kora token: {workload.kind}/{workload.name} has no credentials (Agents and MemoryStores do)",
            file=sys.stderr,
        )
        return 2
    secret = credentials_secret(ref)
    token = read_credentials(located.state_dir).get(f"{ref.namespace}/{secret}/{ADMIN_TOKEN_KEY}")
    if token is None:
        print(
            f"kora token: {workload.kind}/{workload.name} has no token yet (has kora up started it?)", file=sys.stderr
        )
        return 1
    print(token)
    return 0


def token_cli(argv: list[str]) -> int:
    """``kora token NAME``: print the operator's bearer token of an Agent or MemoryStore of the ``kora up`` run
    (kept in ``<state dir>/credentials.json``), for ``Authorization: Bearer`` on its ``/memory/*`` or ``/v1``
    admin routes."""
    return run_command(_token, argv, "kora token")


def _stopped(state_dir: Path) -> bool:
    try:
        return read_state(state_dir).stopped
    except (OSError, ValueError):
        return False


def _down(
    timeout: Annotated[float, typer.Option(help="Seconds to wait until kora up has stopped.", min=0)] = 60.0,
    state_dir: _StateDir = None,
) -> int:
    """Stop the running kora up."""
    located = _load("kora down", state_dir)
    if located is None:
        return 1
    state = located.state
    if not state.running:
        print(_not_running("kora down", located), file=sys.stderr)
        return 1
    os.kill(state.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    # "stopped" in the state file is written last by kora up; the pid check covers a kora up that died. (A
    # finished kora up whose parent has not reaped it yet still has a pid, so the pid alone is not enough.)
    while process_alive(state.pid) and not _stopped(located.state_dir):
        if time.monotonic() > deadline:
            print(f"kora down: kora up (pid {state.pid}) still running after {timeout:g} s", file=sys.stderr)
            return 1
        time.sleep(0.1)
    print(f"kora down: stopped kora up (pid {state.pid})")
    return 0


def down_cli(argv: list[str]) -> int:
    """``kora down``: send SIGTERM to the running ``kora up`` and wait (``--timeout`` s, default 60) until it
    has stopped every workload."""
    return run_command(_down, argv, "kora down")


def _chat(
    agent: Annotated[str, typer.Argument(help="Agent name.")],
    session: Annotated[str | None, typer.Option(help="Continue this session id.")] = None,
    state_dir: _StateDir = None,
) -> int:
    """Talk to an agent through the local gateway."""
    import openai

    found = _find("kora chat", state_dir, agent)
    if isinstance(found, int):
        return found
    located, workload = found
    if workload.kind != "Agent":
        print(f"kora chat: {workload.kind}/{workload.name} is not an Agent", file=sys.stderr)
        return 2
    if not located.state.running:
        print(_not_running("kora chat", located), file=sys.stderr)
        return 1
    client = openai.OpenAI(base_url=workload.gateway_url + "/v1", api_key="unused", max_retries=0)
    interactive = sys.stdin.isatty()
    print(f"chatting with {workload.name} at {workload.gateway_url} (Ctrl-D to quit)", file=sys.stderr)
    failed = False
    while True:
        if interactive:
            print("you > ", end="", flush=True)
        line = sys.stdin.readline()
        if not line:
            if interactive:
                print()  # Ctrl-D ends the prompt's line, so the shell's prompt starts on its own
            return 1 if failed else 0
        text = line.strip()
        if not text:
            continue
        headers = {"X-Session-ID": session} if session else {}
        try:
            raw = client.chat.completions.with_raw_response.create(
                model=workload.name,
                messages=[{"role": "user", "content": text}],
                stream=True,
                extra_headers=headers,
            )
            answered = raw.headers.get("x-session-id") or session
            if answered != session:
                print(
                    f"kora chat: session {answered} (kora chat {workload.name} --session {answered} continues it)",
                    file=sys.stderr,
                )
            session = answered
            print(f"{workload.name} > ", end="", flush=True)
            waiting: list[tuple[str, str, str]] = []  # (tool, arguments, approval id) of calls waiting for approval
            for chunk in raw.parse():
                for choice in chunk.choices:
                    if choice.delta.content:
                        print(choice.delta.content, end="", flush=True)
                    for call in choice.delta.tool_calls or ():
                        marker = (call.model_extra or {}).get(APPROVAL_FIELD)
                        if isinstance(marker, dict) and call.function is not None:
                            waiting.append(
                                (call.function.name or "", call.function.arguments or "", str(marker.get("id")))
                            )
            print(flush=True)
            if waiting and session is not None:
                for tool, arguments, approval in waiting:
                    print(f"  waiting for approval: {tool}({arguments}) [{approval}]", flush=True)
                print(_deciding_text(workload.gateway_url, session, [a for _, _, a in waiting]), file=sys.stderr)
        except openai.APIError as error:
            failed = True
            print(f"\nkora chat: {_error_text(error)}", file=sys.stderr)
            if error.code == "approval_pending" and session is not None:
                print(_deciding_text(workload.gateway_url, session, []), file=sys.stderr)


def _deciding_text(gateway_url: str, session: str, approvals: list[str]) -> str:
    """How to list and decide the calls waiting for approval in ``session`` (the agent's REST route, reached
    through the gateway at ``gateway_url``): one approving command per id of ``approvals`` (a placeholder id when
    none is given), and a rejecting one."""
    post = f"curl -s -X POST {gateway_url}/approvals/%s -H 'Content-Type: application/json' -d %s"
    approve = shlex.quote(json.dumps({"decision": "approve"}))
    reject = shlex.quote(json.dumps({"decision": "reject", "reason": "not now"}))
    ids = [shlex.quote(a) for a in approvals] or ["APPROVAL_ID"]
    lines = [
        f"kora chat: session {session} takes no new message until each waiting call is decided; from another terminal,",
        f"  list them:  curl -s {shlex.quote(f'{gateway_url}/approvals?session_id={session}')}",
        *(f"  approve:    {post % (approval, approve)}" for approval in ids),
        f"  or reject:  {post % (ids[0], reject)}",
        "  (the decision's answer holds the turn's reply, which the session keeps)",
    ]
    return "\n".join(lines)


def _error_text(error: Exception) -> str:
    """An OpenAI client error as one line: the agent's message and code when it sent an error body."""
    body = getattr(error, "body", None)
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        code = body.get("code")
        return f"{body['message']} ({code})" if code else str(body["message"])
    return str(error)


def chat_cli(argv: list[str]) -> int:
    """``kora chat AGENT``: read lines from stdin, stream the agent's answers through the gateway.

    One session for the whole chat: the first answer's ``X-Session-ID`` is printed and sent back with every later
    message, so the agent replays the conversation from its memory. An answer that pauses at calls waiting for a
    person's approval shows each call (tool, arguments, approval id) and how to decide it (``POST
    /approvals/{id}``). Exits 0 on EOF (Ctrl-D), 1 when a message was refused or failed (each such error is printed
    on stderr and the chat goes on).
    """
    return run_command(_chat, argv, "kora chat")


def up_cli(argv: list[str]) -> int:
    """``kora up``: parse ``argv``, run until stopped; returns the exit code (see :mod:`kora.local.up`)."""
    from kora.local.up import up

    return run_command(up, argv, "kora up")
