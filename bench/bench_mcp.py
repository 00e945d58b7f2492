"""Tool-call round trips through the official MCP client: ``kora mcp`` against a bare SDK ``MCPServer``.

Run: ``python bench/bench_mcp.py``. Starts two servers as subprocesses on 127.0.0.1 serving the same tool
(``add(a: int, b: int) -> int``) the same way (Streamable HTTP, stateless, no DNS-rebinding check):

- baseline: the SDK's ``MCPServer`` with the function registered directly (it runs in a thread of the
  server process);
- kora: ``kora mcp`` with the function as inline tools source (schema from type hints and docstring,
  argument validation, the call sent to a worker process with a timeout, error text redaction).

For each it prints sequential round-trip latency (p50/p99, ms) and calls/s, and calls/s with 8 concurrent
callers. Each phase stops after PHASE_SECONDS or its call count, so the whole run stays under 30 s.
"""

from __future__ import annotations

import asyncio
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from kora.core.net import free_port

ROOT = Path(__file__).resolve().parents[1]
SEQUENTIAL_CALLS = 400
CONCURRENT_CALLS = 400
CONCURRENCY = 8
PHASE_SECONDS = 4.0

TOOLS = '''
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first addend.
        b: The second addend.
    """
    return a + b
'''

BASELINE = f"""
import sys, uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
server = MCPServer("baseline", log_level="WARNING")  # as quiet as kora mcp with MCP_LOG_LEVEL=WARNING
exec({TOOLS!r})
server.add_tool(add)
app = server.streamable_http_app(
    streamable_http_path="/mcp", stateless_http=True,
    transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
)
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


def start(kind: str, port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MCP_LOG_LEVEL": "WARNING"}
    if kind == "kora":
        env["MCP_TOOLS_STRING"] = TOOLS
        command = [sys.executable, "-m", "kora.cli", "mcp", "--host", "127.0.0.1", "--port", str(port)]
    else:
        command = [sys.executable, "-c", BASELINE, str(port)]
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def wait_up(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 20
    async with httpx.AsyncClient() as http:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"server exited with {process.returncode}")
            try:
                # kora mcp answers before its tool workers run: wait for /ready. The bare SDK server has no
                # /ready (404), so for it any answer means it is listening.
                ready = await http.get(url.removesuffix("/mcp") + "/ready")
                if ready.status_code in {200, 404}:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError("server did not start")


async def measure(url: str) -> dict[str, float]:
    async with streamable_http_client(url) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        for _ in range(20):  # warm-up: imports, first worker calls, connection pool
            await session.call_tool("add", {"a": 1, "b": 2})
        latencies: list[float] = []
        phase_end = time.monotonic() + PHASE_SECONDS
        started = time.perf_counter()
        while len(latencies) < SEQUENTIAL_CALLS and time.monotonic() < phase_end:
            t0 = time.perf_counter()
            result = await session.call_tool("add", {"a": len(latencies), "b": 1})
            latencies.append(time.perf_counter() - t0)
            assert not result.is_error
        sequential_rate = len(latencies) / (time.perf_counter() - started)

        done = 0
        phase_end = time.monotonic() + PHASE_SECONDS

        async def caller() -> None:
            nonlocal done
            while done < CONCURRENT_CALLS and time.monotonic() < phase_end:
                done += 1
                await session.call_tool("add", {"a": done, "b": 1})

        started = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(CONCURRENCY)))
        concurrent_rate = done / (time.perf_counter() - started)
    latencies.sort()
    return {
        "calls": len(latencies),
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
        "calls_per_s": sequential_rate,
        "concurrent_calls_per_s": concurrent_rate,
    }


async def main() -> None:
    results: dict[str, dict[str, float]] = {}
    for kind in ("baseline", "kora"):
        port = free_port()
        process = start(kind, port)
        try:
            url = f"http://127.0.0.1:{port}/mcp"
            await wait_up(url, process)
            results[kind] = await measure(url)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=10)
    print(f"tool-call round trip via the official MCP client (stateless Streamable HTTP, {os.cpu_count()} CPUs)")
    print(f"{'server':<10}{'calls':>7}{'p50 ms':>9}{'p99 ms':>9}{'calls/s':>10}{f'x{CONCURRENCY} calls/s':>15}")
    for kind, r in results.items():
        print(
            f"{kind:<10}{int(r['calls']):>7}{r['p50_ms']:>9.2f}{r['p99_ms']:>9.2f}"
            f"{r['calls_per_s']:>10.0f}{r['concurrent_calls_per_s']:>15.0f}"
        )
    overhead = results["kora"]["p50_ms"] - results["baseline"]["p50_ms"]
    print(f"kora overhead at p50: {overhead:+.2f} ms per call")


if __name__ == "__main__":
    started = time.monotonic()
    asyncio.run(main())
    print(f"total {time.monotonic() - started:.1f} s")
