"""``kora status | logs | down | chat``: the user's side of a running ``kora up`` (via its state file).

Every command takes ``--state-dir`` (default ``.kora``, as ``kora up``). Exit codes: 0 on success; 1 when
no ``kora up`` ever ran there (or, for ``down``/``chat``, none is running now); 2 for bad arguments or an
unknown workload name.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import TextIO

from kora.local.state import DEFAULT_STATE_DIR, UpState, WorkloadState, process_alive, read_state, render_table

__all__ = ["chat_cli", "down_cli", "logs_cli", "status_cli"]


def _parser(prog: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR, help="state dir of kora up")
    return parser


def _load(prog: str, state_dir: Path) -> UpState | None:
    try:
        return read_state(state_dir)
    except FileNotFoundError:
        print(f"{prog}: no kora up state in {state_dir} (start one with: kora up <manifests>)", file=sys.stderr)
    except ValueError as error:
        print(f"{prog}: {error}", file=sys.stderr)
    return None


def _find(prog: str, state_dir: Path, name: str) -> tuple[UpState, WorkloadState] | int:
    """The state and the workload called ``name``, or the exit code after saying why not (1: no state, 2: no
    such workload)."""
    state = _load(prog, state_dir)
    if state is None:
        return 1
    try:
        return state, state.workload(name)
    except KeyError as error:
        print(f"{prog}: {error.args[0]}", file=sys.stderr)
        return 2


def _running(state: UpState) -> bool:
    return not state.stopped and process_alive(state.pid)


def status_cli(argv: list[str]) -> int:
    """``kora status``: the workload table (phases, gateway and direct URLs, restarts) of the last ``kora up``."""
    args = _parser("kora status", "Show what kora up runs where.").parse_args(argv)
    state = _load("kora status", args.state_dir)
    if state is None:
        return 1
    running = _running(state)
    print(f"kora up (pid {state.pid}) {'running' if running else 'NOT running'}; gateway {state.gateway_url}")
    print(render_table(state))
    restarted = [f"{w.name} x{w.restarts}" for w in state.workloads if w.restarts]
    if restarted:
        print("restarts: " + ", ".join(restarted))
    return 0


def _follow(path: Path, out: TextIO, state: UpState, follow: bool) -> None:
    with open(path, encoding="utf-8", errors="replace") as log:
        out.write(log.read())
        out.flush()
        while follow and _running(state):
            line = log.readline()
            if line:
                out.write(line)
                out.flush()
            else:
                time.sleep(0.2)


def logs_cli(argv: list[str]) -> int:
    """``kora logs NAME [-f]``: print a workload's log (stdout and stderr of every run); ``-f`` follows it
    until Ctrl-C or until ``kora up`` stops."""
    parser = _parser("kora logs", "Print a workload's log.")
    parser.add_argument("name", help="workload name (or Kind/name when two kinds share it)")
    parser.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    args = parser.parse_args(argv)
    found = _find("kora logs", args.state_dir, args.name)
    if isinstance(found, int):
        return found
    state, workload = found
    path = Path(workload.log)
    if not path.exists():
        print(f"kora logs: {workload.kind}/{workload.name} has not started yet ({workload.message})", file=sys.stderr)
        return 1
    with contextlib.suppress(KeyboardInterrupt):
        _follow(path, sys.stdout, state, args.follow)
    return 0


def _stopped(state_dir: Path) -> bool:
    try:
        return read_state(state_dir).stopped
    except (OSError, ValueError):
        return False


def down_cli(argv: list[str]) -> int:
    """``kora down``: send SIGTERM to the running ``kora up`` and wait (``--timeout`` s, default 60) until it
    has stopped every workload."""
    parser = _parser("kora down", "Stop the running kora up.")
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    state = _load("kora down", args.state_dir)
    if state is None:
        return 1
    if not _running(state):
        print("kora down: kora up is not running")
        return 1
    os.kill(state.pid, signal.SIGTERM)
    deadline = time.monotonic() + args.timeout
    # "stopped" in the state file is written last by kora up; the pid check covers a kora up that died. (A
    # finished kora up whose parent has not reaped it yet still has a pid, so the pid alone is not enough.)
    while process_alive(state.pid) and not _stopped(args.state_dir):
        if time.monotonic() > deadline:
            print(f"kora down: kora up (pid {state.pid}) still running after {args.timeout:g} s", file=sys.stderr)
            return 1
        time.sleep(0.1)
    print(f"kora down: stopped kora up (pid {state.pid})")
    return 0


def chat_cli(argv: list[str]) -> int:
    """``kora chat AGENT``: read lines from stdin, stream the agent's answers through the gateway.

    One session for the whole chat: the first answer's ``X-Session-ID`` is sent back with every later
    message, so the agent replays the conversation from its memory. Exits 0 on EOF (Ctrl-D).
    """
    import openai

    parser = _parser("kora chat", "Talk to an agent through the local gateway.")
    parser.add_argument("agent", help="agent name")
    parser.add_argument("--session", default=None, help="continue this session id")
    args = parser.parse_args(argv)
    found = _find("kora chat", args.state_dir, args.agent)
    if isinstance(found, int):
        return found
    state, workload = found
    if workload.kind != "Agent":
        print(f"kora chat: {workload.kind}/{workload.name} is not an Agent", file=sys.stderr)
        return 2
    if not _running(state):
        print("kora chat: kora up is not running", file=sys.stderr)
        return 1
    client = openai.OpenAI(base_url=workload.gateway_url + "/v1", api_key="unused", max_retries=0)
    session: str | None = args.session
    interactive = sys.stdin.isatty()
    print(f"chatting with {workload.name} at {workload.gateway_url} (Ctrl-D to quit)", file=sys.stderr)
    while True:
        if interactive:
            print("you > ", end="", flush=True)
        line = sys.stdin.readline()
        if not line:
            return 0
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
            session = raw.headers.get("x-session-id") or session
            print(f"{workload.name} > ", end="", flush=True)
            for chunk in raw.parse():
                for choice in chunk.choices:
                    if choice.delta.content:
                        print(choice.delta.content, end="", flush=True)
            print(flush=True)
        except openai.APIError as error:
            print(f"\nkora chat: {error}", file=sys.stderr)
