"""``kora up`` start-up time and the local gateway's added latency, measured in one run.

Run: ``python bench/bench_up.py [examples/quickstart]``. Starts ``kora up`` as a subprocess on a free
gateway port with a temporary state dir, and prints:

- time from starting ``kora up`` to every workload Ready (read from the state file, polled every 20 ms);
- per-request latency (p50/p99, ms) of ``GET /v1/models`` on the scripted ModelAPI, directly and through
  the gateway, interleaved request by request so both see the same machine load; the difference of the
  medians is the gateway's added latency;
- the same for a full non-streaming chat turn with a tool call (agent -> model -> MCP -> model) as a
  real-world reference.

Then stops ``kora up`` with SIGTERM.
"""

from __future__ import annotations

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
from kora.local.state import read_state  # noqa: E402

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


def main() -> None:
    example = sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "examples/quickstart")
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        state_dir = Path(tmp) / ".kora"
        started = time.monotonic()
        process = subprocess.Popen(
            [sys.executable, "-m", "kora.cli", "up", example, "--port", str(port), "--state-dir", str(state_dir)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            while True:
                if process.poll() is not None:
                    raise SystemExit(f"kora up exited with {process.returncode}")
                try:
                    state = read_state(state_dir)
                    if state.workloads and all(w.phase == "Ready" for w in state.workloads):
                        break
                except (FileNotFoundError, ValueError):
                    pass
                time.sleep(0.02)
            print(
                f"kora up {Path(example).name}: {len(state.workloads)} workloads Ready in "
                f"{time.monotonic() - started:.2f} s"
            )
            model = next(w for w in state.workloads if w.kind == "ModelAPI")
            compare(
                "GET /v1/models on the scripted model", model.direct_url, model.gateway_url, SIMPLE_REQUESTS, get_models
            )
            agent = next((w for w in state.workloads if w.name == "assistant"), None)
            if agent is not None:
                compare("chat turn with a tool call", agent.direct_url, agent.gateway_url, CHAT_TURNS, chat_turn)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)


if __name__ == "__main__":
    main()
