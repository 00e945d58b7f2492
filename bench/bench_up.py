"""``kora up`` start-up time and the local gateway's added latency, measured in one run.

Run: ``python bench/bench_up.py [examples/quickstart] [--startup-only] [--runs N]``. Starts ``kora up`` as a
subprocess on a free gateway port with a temporary state dir, and prints:

- time from starting ``kora up`` to every workload Ready (read from the state file, polled every 20 ms), and
  for each workload when its process started and when it was first Ready (the timeline shows what waited);
- the time a killed agent (SIGKILL, the last agent in start order) takes to be Ready again;
- per-request latency (p50/p99, ms) of ``GET /v1/models`` on the scripted ModelAPI, directly and through
  the gateway, interleaved request by request so both see the same machine load; the difference of the
  medians is the gateway's added latency;
- the same for a full non-streaming chat turn with a tool call (agent -> model -> MCP -> model) as a
  real-world reference.

Then stops ``kora up`` with SIGTERM. ``--startup-only`` skips the two latency comparisons; ``--runs N`` repeats
start-up and restart N times and prints each run and the median.
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
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kora.core.net import free_port  # noqa: E402
from kora.local.state import UpState, read_state  # noqa: E402

SIMPLE_REQUESTS = 500
CHAT_TURNS = 40


def percentiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"p50 {statistics.median(ordered) * 1000:6.2f} ms  p99 {p99 * 1000:6.2f} ms"


def compare(label: str, direct: str, gateway: str, count: int, send) -> None:
    direct_times: list[float] = []
    gateway_times: list[float] = []
    with httpx.Client(trust_env=False, timeout=60) as client:
        for url in (direct, gateway):  # warm-up: connections, first-request imports
            send(client, url)
        for _ in range(count):
            for url, samples in ((direct, direct_times), (gateway, gateway_times)):
                started = time.perf_counter()
                send(client, url)
                samples.append(time.perf_counter() - started)
    added = (statistics.median(gateway_times) - statistics.median(direct_times)) * 1000
    print(f"{label} ({count} each)")
    print(f"  direct   {percentiles(direct_times)}")
    print(f"  gateway  {percentiles(gateway_times)}")
    print(f"  gateway adds {added:.2f} ms per request (median)")


def get_models(client: httpx.Client, base: str) -> None:
    client.get(base + "/v1/models").raise_for_status()


def chat_turn(client: httpx.Client, base: str) -> None:
    body = {"model": "assistant", "messages": [{"role": "user", "content": "what is 2 plus 3"}]}
    response = client.post(base + "/v1/chat/completions", json=body)
    response.raise_for_status()
    assert response.json()["choices"][0]["message"]["content"] == "2 plus 3 is 5."


def wait_state(process: subprocess.Popen[bytes], state_dir: Path, done, on_state=None) -> UpState:
    """Poll the state file every 20 ms until ``done(state)``; ``on_state(state)`` sees every state read."""
    while True:
        if process.poll() is not None:
            raise SystemExit(f"kora up exited with {process.returncode}")
        try:
            state = read_state(state_dir)
        except (FileNotFoundError, ValueError):
            state = None
        if state is not None:
            if on_state is not None:
                on_state(state)
            if done(state):
                return state
        time.sleep(0.02)


def all_ready(state: UpState) -> bool:
    return bool(state.workloads) and all(w.phase == "Ready" for w in state.workloads)


def start_up(example: str, state_dir: Path) -> tuple[subprocess.Popen[bytes], float, UpState]:
    """Start ``kora up``; return it, the seconds until every workload was Ready, and that state. Prints the
    timeline: each workload's process start and first Ready, in seconds after ``kora up`` started."""
    port = free_port()
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "kora.cli", "up", example, "--port", str(port), "--state-dir", str(state_dir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    first_pid: dict[str, float] = {}
    first_ready: dict[str, float] = {}

    def note(state: UpState) -> None:
        now = time.monotonic() - started
        for workload in state.workloads:
            if workload.pid is not None:
                first_pid.setdefault(workload.name, now)
            if workload.phase == "Ready":
                first_ready.setdefault(workload.name, now)

    state = wait_state(process, state_dir, all_ready, note)
    elapsed = time.monotonic() - started
    timeline = ", ".join(
        f"{w.name} {first_pid.get(w.name, float('nan')):.2f}->{first_ready[w.name]:.2f}" for w in state.workloads
    )
    print(f"kora up {Path(example).name}: {len(state.workloads)} workloads Ready in {elapsed:.2f} s ({timeline})")
    return process, elapsed, state


def restart_time(process: subprocess.Popen[bytes], state_dir: Path, state: UpState) -> float | None:
    """SIGKILL the last agent; seconds until it is Ready again with a new pid (None without an agent)."""
    agent = next((w for w in reversed(state.workloads) if w.kind == "Agent"), None)
    if agent is None or agent.pid is None:
        return None
    old_pid = agent.pid
    started = time.monotonic()
    os.kill(old_pid, signal.SIGKILL)

    def back(current: UpState) -> bool:
        workload = current.workload(agent.name)
        return workload.pid not in (None, old_pid) and workload.phase == "Ready"

    wait_state(process, state_dir, back)
    elapsed = time.monotonic() - started
    print(f"  killed agent {agent.name}: Ready again in {elapsed:.2f} s")
    return elapsed


def stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("example", nargs="?", default=str(ROOT / "examples/quickstart"))
    parser.add_argument("--startup-only", action="store_true", help="skip the gateway latency comparisons")
    parser.add_argument("--runs", type=int, default=1, help="start-up and restart measurements to take")
    options = parser.parse_args()
    example = options.example
    startups: list[float] = []
    restarts: list[float] = []
    for _ in range(options.runs):
        with tempfile.TemporaryDirectory() as tmp:
            state_dir = Path(tmp) / ".kora"
            process, elapsed, state = start_up(example, state_dir)
            startups.append(elapsed)
            try:
                restarted = restart_time(process, state_dir, state)
                if restarted is not None:
                    restarts.append(restarted)
                if options.startup_only or options.runs > 1:
                    continue
                model = next(w for w in state.workloads if w.kind == "ModelAPI")
                compare(
                    "GET /v1/models on the scripted model",
                    model.direct_url,
                    model.gateway_url,
                    SIMPLE_REQUESTS,
                    get_models,
                )
                agent = next((w for w in state.workloads if w.name == "assistant"), None)
                if agent is not None:
                    compare("chat turn with a tool call", agent.direct_url, agent.gateway_url, CHAT_TURNS, chat_turn)
            finally:
                stop(process)
    if options.runs > 1:
        line = f"median of {options.runs}: all Ready in {statistics.median(startups):.2f} s"
        if restarts:
            line += f", killed agent Ready again in {statistics.median(restarts):.2f} s"
        print(line)


if __name__ == "__main__":
    main()
