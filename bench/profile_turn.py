"""Where a text turn's CPU goes: the agent under cProfile, under the text-turn load of ``bench_agent.py``.

Run: ``python bench/profile_turn.py [--turns 2000] [--top 40] [--out FILE] [--no-ratio]`` (~1 min on 2 cores).

First (unless ``--no-ratio``) the unprofiled agent against the floor (``bench/floor_proxy.py``) in the same run,
so the profile's shares can be read against a real per-turn figure. Then a second agent process runs under
cProfile (``bench_agent.py --serve-profiled``: switched on with SIGUSR1 after a warm-up, dumped with SIGUSR2),
drives ``--turns`` non-streaming text turns at concurrency 16 (a fresh session for each), and prints the
exclusive time grouped by package, the top functions by exclusive time and the cumulative time of the turn's
entry points, per turn. cProfile roughly doubles Python-level cost; read shares and counts (calls per turn are
exact), not absolute times. ``--out`` keeps the stats for ``python -m pstats`` or snakeviz.

``--first-content``: streamed turns instead, one at a time (as ``bench_agent.py --first-content`` measures them: the
model sends 5 chunks at once), timed by the agent's CPU time (``PROFILE_CLOCK=cpu``), so that what runs before the
first content chunk is written can be read apart from the waits.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_agent import (
    FRESH,
    HERE,
    HOST,
    Server,
    _first_content_round,
    agent_env,
    free_port,
    otlp_receiver,
    report_profile,
    run_load,
    text_turn,
    traced_env,
)


def profile(turns: int, top: int, out: str | None, tracing: bool = False) -> None:
    """Run the profiled agent under ``turns`` text turns (each a fresh session) and print its profile; with
    ``tracing``, every turn traced and exported to an OTLP/HTTP receiver in this process (as ``bench_agent.py
    --tracing`` runs it; cProfile sees the main thread only, not the export thread)."""
    py = sys.executable
    extra: dict[str, str] = {}
    receiver = None
    if tracing:
        receiver = otlp_receiver()
        extra = traced_env(f"http://{HOST}:{receiver.server_address[1]}")
    model_port, agent_port = free_port(), free_port()
    model = Server(
        [py, str(HERE / "stamping_model.py")], os.environ | {"MODEL_PORT": str(model_port)}, model_port, None
    )
    stats = out or str(Path(tempfile.mkdtemp()) / "turn.prof")
    Path(stats).write_bytes(b"")
    agent = Server(
        [py, str(HERE / "bench_agent.py"), "--serve-profiled", stats],
        {key: value for key, value in agent_env(model_port, agent_port).items() if not key.startswith("OTEL_")} | extra,
        agent_port,
        "/ready",
    )
    try:
        model.start()
        agent.start()
        run_load(agent_port, 300, 0, {}, sessions=FRESH)
        os.kill(agent.pid, signal.SIGUSR1)
        load = run_load(agent_port, turns, 300, {"server": agent.pid}, sessions=FRESH)
        os.kill(agent.pid, signal.SIGUSR2)
        deadline = time.monotonic() + 60
        while os.path.getsize(stats) == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)  # the dump is written in one go, but let it finish
    finally:
        agent.stop()
        model.stop()
        if receiver is not None:
            receiver.shutdown()
    print(
        f"\nprofiled agent on {HOST}: {1000 * load['cpu_s']['server'] / load['turns']:.2f} ms CPU per turn "
        "under cProfile"
    )
    report_profile(stats, load["turns"], top=top)
    if not out:
        os.unlink(stats)


def profile_first_content(turns: int, top: int, out: str | None) -> None:
    """Run the profiled agent (CPU-time clock) under ``turns`` streamed turns at concurrency 1 and print its
    profile."""
    py = sys.executable
    model_port, agent_port = free_port(), free_port()
    model_env = os.environ | {"MODEL_PORT": str(model_port), "STREAM_CHUNKS": "5", "STREAM_DELAY": "0"}
    model = Server([py, str(HERE / "stamping_model.py")], model_env, model_port, None)
    stats = out or str(Path(tempfile.mkdtemp()) / "first-content.prof")
    Path(stats).write_bytes(b"")
    agent = Server(
        [py, str(HERE / "bench_agent.py"), "--serve-profiled", stats],
        agent_env(model_port, agent_port) | {"PROFILE_CLOCK": "cpu"},
        agent_port,
        "/ready",
    )
    try:
        model.start()
        agent.start()
        asyncio.run(_first_content_round(agent_port, 200, 0))
        os.kill(agent.pid, signal.SIGUSR1)
        asyncio.run(_first_content_round(agent_port, turns, 200))
        os.kill(agent.pid, signal.SIGUSR2)
        deadline = time.monotonic() + 60
        while os.path.getsize(stats) == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)
    finally:
        agent.stop()
        model.stop()
    print(f"\nprofiled agent on {HOST}: {turns} streamed turns, one at a time (CPU-time clock)")
    report_profile(stats, turns, top=top)
    if not out:
        os.unlink(stats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=2000, help="profiled turns (default 2000)")
    parser.add_argument("--top", type=int, default=40, help="functions listed (default 40)")
    parser.add_argument("--out", metavar="FILE", help="keep the cProfile stats in FILE")
    parser.add_argument("--no-ratio", action="store_true", help="skip the unprofiled agent-vs-floor measurement")
    parser.add_argument(
        "--tracing", action="store_true", help="every turn traced and exported (OTLP/HTTP to a receiver here)"
    )
    parser.add_argument(
        "--first-content", action="store_true", help="profile streamed turns one at a time (CPU-time clock)"
    )
    args = parser.parse_args()
    if args.first_content:
        profile_first_content(args.turns, args.top, args.out)
        return
    if not args.no_ratio:
        print(text_turn(rounds=2, turns=1000).line(), flush=True)
    profile(args.turns, args.top, args.out, tracing=args.tracing)


if __name__ == "__main__":
    main()
