"""Benchmark of the agent server (``kora agent``) against a bare FastAPI proxy, measured in the same run.

Run: ``python bench/bench_agent.py`` (about 2 minutes on 2 cores; loopback only). ``--quick`` runs fewer
turns. ``--no-profile`` skips the profile. Prints one table, then the profile of the agent per turn.

Processes (all on 127.0.0.1): the scripted model (``bench/stamping_model.py``: Kora's scripted model plus send
timestamps of streamed chunks), the agent server (``kora agent`` from the environment, as deployed), the
baseline proxy (``bench/baseline_proxy.py``) and, for each load phase, a load-generator *subprocess* (this
file with ``--loadgen``: raw asyncio HTTP/1.1 on keep-alive connections, uvloop). The server figures come from
``/proc/<pid>/stat`` (utime+stime of the server process, all threads) read before and after the load-generator
ran, so neither the load generator's nor the model's CPU is in them (they are shown separately).

Figures:

1. CPU per turn of the server and turns/s at concurrency 16 (non-streaming chat turns, 1000 sessions
   round-robin, after a warm-up). Baseline: the proxy, same load, same model.
2. Seconds from ``Popen`` to ``GET /health`` answering 200, and to ``GET /ready`` (median of 3 cold starts).
3. RSS (``VmRSS``) of the agent after 10k turns over 1000 sessions (each session then holds 20 events).
4. Streaming: per chunk, model send time (stamped in the model process right after the chunk went to the
   socket, ``time.monotonic()``) to receipt in this process (``time.monotonic()`` when the bytes came out of
   the socket); CLOCK_MONOTONIC is one clock for all processes. Direct = client reading the model's stream;
   via agent = client reading the agent's stream of the same script. Added latency = via agent - direct.

5. An agent offering the memory tools: start-up, RSS, CPU per text turn and per tool-calling turn (``save_memory``
   runs in-process; two model requests).
6. An agent with one MCP tool server (``kora mcp``, one inline tool): start-up, RSS, agent CPU per tool-calling
   turn (one ``add`` call over Streamable HTTP, two model requests), the tool server's CPU shown apart; its
   baseline is ``bench/pydantic_ai_floor.py``, a bare pydantic-ai ``Agent.run`` server with the same toolset (the
   floor: pydantic-ai's and the MCP SDK's own cost of the same turn, with no sessions, memory or events).
7. Tail latency: p50/p99 of text turns at concurrency 64, agent against the baseline proxy.

``--text-turn`` measures only the text turn against the floor (``bench/floor_proxy.py``); ``--tracing`` the text
turn with every turn traced and exported over OTLP/HTTP against the same agent untraced and the floor;
``--first-content`` the first streamed content (and CPU per streamed turn) against the floor relaying the
model's chunks; ``--tool-turn`` an MCP tool-calling turn against ``bench/pydantic_ai_floor.py``.

Profile: a second agent process runs under cProfile, switched on (SIGUSR1) only for the measured turns and
dumped (SIGUSR2); exclusive time is grouped by package, so the groups add up to the profiled CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path

from kora.core.net import free_port

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
HOST = "127.0.0.1"
CLK_TCK = os.sysconf("SC_CLK_TCK")
CONCURRENCY = 16
SESSIONS = 1000
#: Load prompts and what the answer must contain: plain turns are answered by the first model request; for
#: "tool-bench" turns the model calls save_memory first (stamping_model.py), so pydantic-ai's loop runs.
EXPECTED = {"hello number": b"You said: hello number", "tool-bench": b"Saved.", "mcp-bench": b"Sum: 5"}
#: The inline tool of the MCP-server phase (``kora mcp`` with MCP_TOOLS_STRING).
MCP_TOOLS = '''
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b
'''
#: Concurrency of the tail-latency phase (text turns, agent against the baseline proxy).
HIGH_CONCURRENCY = 64


# --------------------------------------------------------------------------------------------------
# Load generator (runs in its own process: ``--loadgen``)
# --------------------------------------------------------------------------------------------------


async def _load(port: int, turns: int, concurrency: int, sessions: int, offset: int, prompt: str) -> dict:
    counter = itertools.count()
    expected = EXPECTED[prompt]
    latencies: list[float] = []
    errors: list[str] = []

    async def worker() -> None:
        reader, writer = await asyncio.open_connection(HOST, port)
        try:
            while (i := next(counter)) < turns:
                n = offset + i
                body = json.dumps(
                    {
                        "model": "bench",
                        "messages": [{"role": "user", "content": f"{prompt} {n}"}],
                        "session_id": f"bench-{n % sessions}",
                    }
                ).encode()
                request = (
                    b"POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
                )
                started = time.perf_counter()
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(re.search(rb"(?i)content-length:\s*(\d+)", head).group(1))  # type: ignore[union-attr]
                payload = await reader.readexactly(length)
                latencies.append(time.perf_counter() - started)
                if head[9:12] != b"200" or expected not in payload:
                    errors.append((head[:12] + b" " + payload[:200]).decode(errors="replace"))
        finally:
            writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - started
    latencies.sort()
    usage = os.times()
    return {
        "turns": len(latencies),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "wall_s": wall,
        "turns_per_s": len(latencies) / wall,
        "p50_ms": 1000 * latencies[len(latencies) // 2],
        "p99_ms": 1000 * latencies[int(len(latencies) * 0.99)],
        "loadgen_cpu_s": usage.user + usage.system,
    }


def loadgen_main(args: argparse.Namespace) -> None:
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover
        pass
    result = asyncio.run(_load(args.port, args.turns, args.concurrency, args.sessions, args.offset, args.prompt))
    print(json.dumps(result))


# --------------------------------------------------------------------------------------------------
# Process helpers
# --------------------------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """utime + stime of the process (all its threads), from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


#: The bench agent's operator token (AGENT_ADMIN_TOKEN): /memory/sessions lists every session only for it.
OPERATOR_TOKEN = "bench-operator-token"


def http_get(port: int, path: str, timeout: float = 1.0, token: str = "") -> tuple[int, bytes]:
    """A minimal blocking GET (no client library: start-up polling must not pay for imports); ``token`` is sent as
    the bearer token when given."""
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    with socket.create_connection((HOST, port), timeout=timeout) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: bench\r\n{auth}Connection: close\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return int(data[9:12]), data.split(b"\r\n\r\n", 1)[-1]


def wait_status(port: int, path: str, deadline: float, poll: float = 0.005) -> float:
    """time.monotonic() when ``GET path`` first answered 200."""
    while time.monotonic() < deadline:
        try:
            if http_get(port, path)[0] == 200:
                return time.monotonic()
        except OSError:
            pass
        time.sleep(poll)
    raise TimeoutError(f"port {port}{path} did not answer 200 in time")


def agent_env(model_port: int, port: int) -> dict[str, str]:
    return os.environ | {
        "AGENT_NAME": "bench-agent",
        "AGENT_ADMIN_TOKEN": OPERATOR_TOKEN,
        "MODEL_API_URL": f"http://{HOST}:{model_port}/v1",
        "MODEL_NAME": "scripted",
        "AGENT_PORT": str(port),
        "AGENT_HOST": HOST,
        "AGENT_LOG_LEVEL": "WARNING",
    }


class Server:
    """A server subprocess; ``start`` returns (seconds to /health, seconds to /ready or None)."""

    def __init__(
        self, argv: list[str], env: dict[str, str], port: int, ready_path: str | None, cwd: Path = ROOT
    ) -> None:
        self.argv, self.env, self.port, self.ready_path, self.cwd = argv, env, port, ready_path, cwd
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> tuple[float, float | None]:
        started = time.monotonic()
        self.proc = subprocess.Popen(self.argv, env=self.env, cwd=self.cwd, stdout=subprocess.DEVNULL)
        healthy = wait_status(self.port, "/health", started + 60)
        ready = wait_status(self.port, self.ready_path, started + 60) if self.ready_path else None
        return healthy - started, (ready - started if ready else None)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def run_load(
    port: int,
    turns: int,
    offset: int,
    watch: dict[str, int],
    prompt: str = "hello number",
    concurrency: int = CONCURRENCY,
    sessions: int = SESSIONS,
) -> dict:
    """Drive ``turns`` chat turns from a load-generator subprocess (turn ``n`` in session ``bench-{n % sessions}``);
    CPU seconds of each ``watch``ed pid."""
    before = {name: cpu_seconds(pid) for name, pid in watch.items()}
    argv = [sys.executable, __file__, "--loadgen", "--port", str(port), "--turns", str(turns)]
    out = subprocess.run(
        [
            *argv,
            "--offset",
            str(offset),
            "--prompt",
            prompt,
            "--concurrency",
            str(concurrency),
            "--sessions",
            str(sessions),
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result = json.loads(out)
    result["cpu_s"] = {name: cpu_seconds(pid) - before[name] for name, pid in watch.items()}
    if result["errors"]:
        print(f"  !! {result['errors']} failed turns, first: {result['first_error']}", file=sys.stderr)
    return result


# --------------------------------------------------------------------------------------------------
# Text turn against the floor (``--text-turn``: the quick mode CI runs; profile_turn.py reuses it)
# --------------------------------------------------------------------------------------------------


def floor_server(model_port: int, port: int) -> Server:
    """The floor of a text turn (``bench/floor_proxy.py``: FastAPI + uvicorn, one raw pooled request to the
    model)."""
    env = os.environ | {"MODEL_API_URL": f"http://{HOST}:{model_port}/v1", "PROXY_PORT": str(port)}
    return Server([sys.executable, str(HERE / "floor_proxy.py")], env, port, None)


#: ``sessions`` of a load where every turn opens a fresh session.
FRESH = 10**9


def cpu_rounds(
    servers: dict[str, Server], model: Server, rounds: int, turns: int, prompt: str = "hello number"
) -> dict[str, list[float]]:
    """CPU per turn (ms; text turns, or ``prompt``'s) of each server, in alternating rounds of ``turns`` each (a
    warm-up round of each first), and the model's CPU per turn under each (``model (name)``); lists of one value
    per round."""
    result: dict[str, list[float]] = {}
    offset = 0
    for round_ in range(rounds + 1):
        for name, server in servers.items():
            watch = {"server": server.pid, "model": model.pid}
            load = run_load(server.port, turns, offset, watch, prompt=prompt, sessions=FRESH)
            offset += turns
            if load["errors"]:
                raise RuntimeError(f"{name}: {load['errors']} failed turns, first: {load['first_error']}")
            if round_:
                result.setdefault(name, []).append(1000 * load["cpu_s"]["server"] / load["turns"])
                result.setdefault(f"model ({name})", []).append(1000 * load["cpu_s"]["model"] / load["turns"])
    return result


def text_turn_rounds(agent: Server, floor: Server, model: Server, rounds: int, turns: int) -> dict[str, list[float]]:
    """CPU per text turn (ms) of the agent and of the floor, in alternating rounds (:func:`cpu_rounds`)."""
    return cpu_rounds({"agent": agent, "floor": floor}, model, rounds, turns)


@dataclass
class TextTurn:
    """A text-turn measurement against the floor, from one run: CPU per turn in ms (median of the rounds and each
    round), seconds from start to the first 200 of ``/health`` (and the agent's ``/ready``), RSS after the load."""

    agent_rounds: list[float]
    floor_rounds: list[float]
    agent_health_s: float
    floor_health_s: float
    agent_ready_s: float
    agent_rss_mb: float
    floor_rss_mb: float

    @property
    def agent_ms(self) -> float:
        return statistics.median(self.agent_rounds)

    @property
    def floor_ms(self) -> float:
        return statistics.median(self.floor_rounds)

    @property
    def ratio(self) -> float:
        return self.agent_ms / self.floor_ms

    def line(self, label: str = "text turn") -> str:
        """One line a CI log keeps (printed, never asserted: single numbers are noisy on a loaded machine, the
        ratio to the floor of the same run much less)."""
        rounds = " ".join(f"{a:.2f}/{f:.2f}" for a, f in zip(self.agent_rounds, self.floor_rounds, strict=True))
        return (
            f"bench {label}: agent {self.agent_ms:.3f} ms CPU per turn, floor {self.floor_ms:.3f} ms, ratio "
            f"{self.ratio:.2f}x (rounds agent/floor: {rounds}); start to /health agent {self.agent_health_s:.2f} s, "
            f"floor {self.floor_health_s:.2f} s, agent /ready {self.agent_ready_s:.2f} s; RSS agent "
            f"{self.agent_rss_mb:.0f} MB, floor {self.floor_rss_mb:.0f} MB; load average {os.getloadavg()[0]:.1f}"
        )


def text_turn(rounds: int = 3, turns: int = 1000, extra_env: dict[str, str] | None = None) -> TextTurn:
    """Start the scripted model, an agent (metrics on, as by default; ``extra_env`` added) and the floor, and
    measure a non-streaming text turn at concurrency 16 in alternating rounds of ``turns``."""
    model_port, agent_port, floor_port = free_port(), free_port(), free_port()
    model = Server(
        [sys.executable, str(HERE / "stamping_model.py")],
        os.environ | {"MODEL_PORT": str(model_port)},
        model_port,
        None,
    )
    agent = Server(
        [sys.executable, "-m", "kora.cli", "agent"],
        agent_env(model_port, agent_port) | (extra_env or {}),
        agent_port,
        "/ready",
    )
    floor = floor_server(model_port, floor_port)
    try:
        model.start()
        floor_health, _ = floor.start()
        agent_health, agent_ready = agent.start()
        per_round = text_turn_rounds(agent, floor, model, rounds, turns)
        return TextTurn(
            per_round["agent"],
            per_round["floor"],
            agent_health,
            floor_health,
            agent_ready or 0.0,
            rss_mb(agent.pid),
            rss_mb(floor.pid),
        )
    finally:
        for server in (agent, floor, model):
            server.stop()


def library_floor(rounds: int = 6, turns: int = 600) -> str:
    """The text turn of the agent against the library floor (``library_floor.py``: the least a turn does on the
    libraries Kora is built on; with its four metric records and without) and the floor, in alternating rounds of
    ``turns`` (:func:`cpu_rounds`). Returns the lines printed: each server's CPU per turn (median, ms) and its
    ratio to the floor."""
    model_port = free_port()
    model = Server(
        [sys.executable, str(HERE / "stamping_model.py")],
        os.environ | {"MODEL_PORT": str(model_port)},
        model_port,
        None,
    )
    agent_port = free_port()
    agent = Server([sys.executable, "-m", "kora.cli", "agent"], agent_env(model_port, agent_port), agent_port, "/ready")
    libraries: dict[str, Server] = {}
    for name, metrics in (("library floor", "on"), ("library floor, no metrics", "off")):
        port = free_port()
        env = os.environ | {
            "MODEL_API_URL": f"http://{HOST}:{model_port}/v1",
            "PROXY_PORT": str(port),
            "LIBRARY_FLOOR_METRICS": metrics,
        }
        libraries[name] = Server([sys.executable, str(HERE / "library_floor.py")], env, port, None)
    floor = floor_server(model_port, free_port())
    servers = {"agent": agent, **libraries, "floor": floor}
    try:
        model.start()
        for server in servers.values():
            server.start()
        load = os.getloadavg()[0]
        per_round = cpu_rounds(servers, model, rounds, turns)
        floor_ms = statistics.median(per_round["floor"])
        lines = []
        for name in servers:
            median = statistics.median(per_round[name])
            each = " ".join(f"{ms:.3f}" for ms in per_round[name])
            lines.append(f"{name:27s} {median:.3f} ms CPU per turn ({median / floor_ms:.2f}x the floor); rounds {each}")
        lines.append(f"load average {load:.1f} -> {os.getloadavg()[0]:.1f}")
        print("\n".join(lines), flush=True)
        return "\n".join(lines)
    finally:
        for server in (*servers.values(), model):
            server.stop()


def rss_growth(trees: list[str], runs: int = 3, first: int = 5000, total: int = 20_000) -> str:
    """RSS of ``kora agent`` over a long text-turn load, one tree after another in ``runs`` alternating runs (each
    tree's agent runs from its own directory and ``PYTHONPATH``; default: this tree): seconds from start to
    ``/health`` and ``/ready`` (and the floor's start to its first answer, same run), MB at ``/ready`` (1 s after),
    after ``first`` and after ``total`` text turns (fresh session each, concurrency 16), and the growth between the
    two. Returns the lines printed."""
    lines = []
    model_port = free_port()
    model_env = os.environ | {"MODEL_PORT": str(model_port)}
    model = Server([sys.executable, str(HERE / "stamping_model.py")], model_env, model_port, None)
    model.start()
    try:
        for run in range(runs):
            floor = floor_server(model_port, free_port())
            floor_health, _ = floor.start()
            floor.stop()
            for tree in trees:
                port = free_port()
                env = agent_env(model_port, port) | {"PYTHONPATH": tree}
                agent = Server([sys.executable, "-m", "kora.cli", "agent"], env, port, "/ready", cwd=Path(tree))
                try:
                    health, ready = agent.start()
                    time.sleep(1)
                    at_ready = rss_mb(agent.pid)
                    run_load(agent.port, first, 0, {}, sessions=FRESH)
                    at_first = rss_mb(agent.pid)
                    run_load(agent.port, total - first, first, {}, sessions=FRESH)
                    at_total = rss_mb(agent.pid)
                finally:
                    agent.stop()
                lines.append(
                    f"bench rss run {run + 1} {tree}: start to /health {health:.2f} s, /ready {ready or 0:.2f} s "
                    f"(floor's first answer {floor_health:.2f} s); RSS at /ready {at_ready:.1f} MB, after {first} "
                    f"turns {at_first:.1f} MB, after {total} {at_total:.1f} MB (growth {at_total - at_first:+.1f} MB); "
                    f"load average {os.getloadavg()[0]:.1f}"
                )
                print(lines[-1], flush=True)
    finally:
        model.stop()
    return "\n".join(lines)


def otlp_receiver() -> ThreadingHTTPServer:
    """An OTLP/HTTP receiver serving from a daemon thread of this process (``bench_telemetry._Receiver``: answers
    every export, counts them)."""
    from bench_telemetry import _Receiver

    receiver = ThreadingHTTPServer((HOST, 0), _Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    return receiver


def traced_env(endpoint: str) -> dict[str, str]:
    """The environment of an agent that traces every turn and exports it to ``endpoint`` (OTLP/HTTP)."""
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_TRACES_SAMPLER": "always_on",
        "OTEL_BSP_SCHEDULE_DELAY": "500",
    }


def thread_cpu_seconds(pid: int) -> dict[int, float]:
    """CPU seconds (user + system) of each thread of ``pid``, by thread id (the main thread's is ``pid``)."""
    ticks = os.sysconf("SC_CLK_TCK")
    result = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(FileNotFoundError), open(f"/proc/{pid}/task/{tid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
            result[int(tid)] = (int(fields[11]) + int(fields[12])) / ticks
    return result


def tracing_turn(rounds: int = 3, turns: int = 1000, before: Path | None = None) -> str:
    """The text turn with every turn traced and exported against the same turn untraced and the floor, one run:
    three servers (agent with ``OTEL_EXPORTER_OTLP_ENDPOINT`` set to an OTLP/HTTP receiver in this process and
    ``OTEL_TRACES_SAMPLER=always_on``; agent without; ``floor_proxy.py``) on one scripted model, alternating rounds
    of ``turns`` at concurrency 16; with ``before`` (another tree of the repository), a fourth server: that tree's
    agent traced, run from that tree. Returns the line printed: the medians, "on - off" and its target (+0.3 ms,
    or 2x the floor's CPU if larger), and how much of each traced agent's CPU its other threads (the span
    exporter's) took."""
    from bench_telemetry import _Receiver

    receiver = otlp_receiver()
    endpoint = f"http://{HOST}:{receiver.server_address[1]}"
    model_port = free_port()
    model_env = os.environ | {"MODEL_PORT": str(model_port)}
    model = Server([sys.executable, str(HERE / "stamping_model.py")], model_env, model_port, None)

    def agent(extra: dict[str, str], tree: Path = ROOT) -> Server:
        port = free_port()
        env = {key: value for key, value in agent_env(model_port, port).items() if not key.startswith("OTEL_")}
        env["PYTHONPATH"] = str(tree)
        return Server([sys.executable, "-m", "kora.cli", "agent"], env | extra, port, "/ready", cwd=tree)

    servers = {"off": agent({}), "on": agent(traced_env(endpoint)), "floor": floor_server(model_port, free_port())}
    if before is not None:
        servers["on (before)"] = agent(traced_env(endpoint), before)
    traced = [name for name in servers if name.startswith("on")]
    threads: dict[str, list[float]] = {name: [] for name in traced}
    try:
        model.start()
        for server in servers.values():
            server.start()
        marks = {name: thread_cpu_seconds(servers[name].pid) for name in traced}
        per_round = cpu_rounds(servers, model, rounds, turns)
        for name in traced:
            pid, after = servers[name].pid, thread_cpu_seconds(servers[name].pid)
            others = sum(cpu - marks[name].get(tid, 0.0) for tid, cpu in after.items() if tid != pid)
            threads[name].append(1000 * others / (turns * (rounds + 1)))
    finally:
        for server in [*servers.values(), model]:
            server.stop()
        receiver.shutdown()
    if not _Receiver.exports.get("/v1/traces"):
        raise RuntimeError("the traced agent exported no spans")
    off, on, floor = (statistics.median(per_round[name]) for name in ("off", "on", "floor"))
    target = max(0.3, 2 * floor)
    columns = zip(per_round["off"], per_round["on"], per_round["floor"], strict=True)
    rounds_text = " ".join(f"{a:.2f}/{b:.2f}/{c:.2f}" for a, b, c in columns)
    line = (
        f"bench tracing: agent traced {on:.3f} ms CPU per text turn, untraced {off:.3f} ms, floor {floor:.3f} ms; "
        f"on - off {on - off:+.3f} ms (target <= +{target:.2f} ms: max(0.3, 2x floor)) (rounds off/on/floor: "
        f"{rounds_text}); export thread ~{threads['on'][0]:.2f} ms a turn"
    )
    if before is not None:
        was = statistics.median(per_round["on (before)"])
        pairs = " ".join(f"{a:.2f}/{b:.2f}" for a, b in zip(per_round["on (before)"], per_round["on"], strict=True))
        line += (
            f"; before ({before}): traced {was:.3f} ms, on - off {was - off:+.3f} ms, export thread "
            f"~{threads['on (before)'][0]:.2f} ms (rounds before/now: {pairs})"
        )
    return f"{line}; exports {dict(_Receiver.exports)}; load average {os.getloadavg()[0]:.1f}"


async def _first_content_round(port: int, turns: int, offset: int) -> list[float]:
    """``turns`` streamed chat turns one after the other on ``port``; per turn, ms from sending the request to the
    first content (the model's first chunk, ``c00|``) coming out of the socket."""
    import httpx

    latencies = []
    async with httpx.AsyncClient(timeout=30) as client:
        for n in range(offset, offset + turns):
            body = {
                "model": "scripted",
                "stream": True,
                "messages": [{"role": "user", "content": f"stream-bench {n}"}],
                "session_id": f"first-{n}",
            }
            started, first = time.monotonic(), None
            async with client.stream("POST", f"http://{HOST}:{port}/v1/chat/completions", json=body) as response:
                assert response.status_code == 200, response.status_code
                buffer = b""
                async for piece in response.aiter_raw():
                    buffer += piece
                    if first is None and b"c00|" in buffer:
                        first = time.monotonic()
            assert first is not None, buffer[-300:]
            latencies.append(1000 * (first - started))
    return latencies


def first_content(rounds: int = 3, turns: int = 200) -> str:
    """First streamed content through the agent against the floor (``floor_proxy.py`` relaying the model's chunks)
    and the model read directly, one run: alternating rounds of ``turns`` streamed turns at concurrency 1 (the model
    sends 5 chunks at once: ``STREAM_DELAY=0``). Returns the line printed: median ms to the first content of each,
    the agent's and the floor's CPU per streamed turn, and the ratios to the floor."""
    model_port, agent_port, floor_port = free_port(), free_port(), free_port()
    model_env = os.environ | {"MODEL_PORT": str(model_port), "STREAM_CHUNKS": "5", "STREAM_DELAY": "0"}
    model = Server([sys.executable, str(HERE / "stamping_model.py")], model_env, model_port, None)
    agent = Server([sys.executable, "-m", "kora.cli", "agent"], agent_env(model_port, agent_port), agent_port, "/ready")
    floor = floor_server(model_port, floor_port)
    latency: dict[str, list[float]] = {"agent": [], "floor": [], "direct": []}
    cpu: dict[str, list[float]] = {"agent": [], "floor": []}
    try:
        for server in (model, agent, floor):
            server.start()
        offset = 0
        for round_ in range(rounds + 1):
            for name, server in (("agent", agent), ("floor", floor), ("direct", model)):
                before = cpu_seconds(server.pid)
                measured = asyncio.run(_first_content_round(server.port, turns, offset))
                offset += turns
                if round_:
                    latency[name] += measured
                    if name in cpu:
                        cpu[name].append(1000 * (cpu_seconds(server.pid) - before) / turns)
    finally:
        for server in (agent, floor, model):
            server.stop()
    first = {name: statistics.median(values) for name, values in latency.items()}
    per_turn = {name: statistics.median(values) for name, values in cpu.items()}
    return (
        f"bench first content: agent {first['agent']:.2f} ms, floor {first['floor']:.2f} ms, model direct "
        f"{first['direct']:.2f} ms (median of {rounds * turns} streamed turns each; agent/floor "
        f"{first['agent'] / first['floor']:.2f}x, target <= 1.5x); CPU per streamed turn agent "
        f"{per_turn['agent']:.3f} ms, floor {per_turn['floor']:.3f} ms ({per_turn['agent'] / per_turn['floor']:.2f}x); "
        f"load average {os.getloadavg()[0]:.1f}"
    )


def tool_turn(rounds: int = 3, turns: int = 500) -> str:
    """A tool-calling turn (``mcp-bench``: the model calls ``add`` of one ``kora mcp`` server, the agent calls it
    over Streamable HTTP, the model answers: 2 model requests, 1 tool call) through the agent against pydantic-ai's
    own floor (``bench/pydantic_ai_floor.py``: ``Agent.run`` with the same MCP toolset and nothing else), one run,
    alternating rounds of ``turns`` at concurrency 16. Returns the line printed: CPU per turn of each (median of the
    rounds) and the ratio."""
    model_port, mcp_port, agent_port, floor_port = free_port(), free_port(), free_port(), free_port()
    model = Server(
        [sys.executable, str(HERE / "stamping_model.py")],
        os.environ | {"MODEL_PORT": str(model_port)},
        model_port,
        None,
    )
    mcp_env = os.environ | {"MCP_TOOLS_STRING": MCP_TOOLS, "MCP_LOG_LEVEL": "WARNING"}
    mcp = Server(
        [sys.executable, "-m", "kora.cli", "mcp", "--host", HOST, "--port", str(mcp_port)], mcp_env, mcp_port, "/ready"
    )
    tools = {"MCP_SERVERS": "calc", "MCP_SERVER_CALC_URL": f"http://{HOST}:{mcp_port}"}
    agent = Server(
        [sys.executable, "-m", "kora.cli", "agent"], agent_env(model_port, agent_port) | tools, agent_port, "/ready"
    )
    floor_env = {
        "MODEL_API_URL": f"http://{HOST}:{model_port}/v1",
        "MCP_URL": f"http://{HOST}:{mcp_port}/mcp",
        "FLOOR_PORT": str(floor_port),
    }
    floor = Server([sys.executable, str(HERE / "pydantic_ai_floor.py")], os.environ | floor_env, floor_port, None)
    try:
        for server in (model, mcp, agent, floor):
            server.start()
        per_round = cpu_rounds({"agent": agent, "floor": floor}, model, rounds, turns, prompt="mcp-bench")
    finally:
        for server in (agent, floor, mcp, model):
            server.stop()
    agent_ms, floor_ms = statistics.median(per_round["agent"]), statistics.median(per_round["floor"])
    rounds_text = " ".join(f"{a:.2f}/{f:.2f}" for a, f in zip(per_round["agent"], per_round["floor"], strict=True))
    return (
        f"bench tool turn: agent {agent_ms:.2f} ms CPU per turn, pydantic-ai floor {floor_ms:.2f} ms, ratio "
        f"{agent_ms / floor_ms:.2f}x (rounds agent/floor: {rounds_text}); load average {os.getloadavg()[0]:.1f}"
    )


# --------------------------------------------------------------------------------------------------
# Streaming latency (runs in this process)
# --------------------------------------------------------------------------------------------------


async def stream_latencies(model_port: int, agent_port: int, runs: int) -> dict[str, list[float]]:
    import httpx

    marker = re.compile(rb"c(\d\d)\|")
    result: dict[str, list[float]] = {"direct": [], "agent": []}
    targets = {"direct": (model_port, "/v1/chat/completions"), "agent": (agent_port, "/v1/chat/completions")}
    async with httpx.AsyncClient(timeout=30) as client:
        for run in range(runs + 1):  # run 0 warms up both paths
            for name, (port, path) in targets.items():
                body = {
                    "model": "scripted",
                    "stream": True,
                    "messages": [{"role": "user", "content": f"stream-bench {run}"}],
                    "session_id": f"stream-{run}",
                }
                received: dict[str, float] = {}
                buffer = b""
                async with client.stream("POST", f"http://{HOST}:{port}{path}", json=body) as response:
                    assert response.status_code == 200, response.status_code
                    async for piece in response.aiter_raw():
                        now = time.monotonic()
                        buffer += piece
                        for match in marker.finditer(buffer):
                            received.setdefault(match.group(1).decode(), now)
                        buffer = buffer[-8:]
                sends = (await client.get(f"http://{HOST}:{model_port}/_bench/sends")).json()
                assert sends.keys() == received.keys(), (sends.keys(), received.keys())
                if run:
                    result[name] += [1000 * (received[k] - sends[k]) for k in sends]
    return result


# --------------------------------------------------------------------------------------------------
# Profile of the agent per turn (``--serve-profiled``: the agent server with cProfile toggled by signals)
# --------------------------------------------------------------------------------------------------


def serve_profiled(out: str) -> None:
    """The agent under cProfile (on at SIGUSR1, dumped to ``out`` at SIGUSR2). ``PROFILE_CLOCK=cpu``: timed by the
    thread's CPU time instead of the wall clock, so time the process spent preempted (on a loaded machine, right
    after each socket write that wakes a peer) is not charged to the function that was running."""
    import cProfile

    profiler = cProfile.Profile(time.thread_time) if os.environ.get("PROFILE_CLOCK") == "cpu" else cProfile.Profile()
    signal.signal(signal.SIGUSR1, lambda *_: profiler.enable())

    def dump(*_: object) -> None:
        profiler.disable()
        profiler.dump_stats(out)

    signal.signal(signal.SIGUSR2, dump)
    from kora.cli import main

    raise SystemExit(main(["agent"]))


GROUPS = [
    (
        "pydantic-ai agent graph",
        ("pydantic_ai/_agent_graph", "pydantic_graph/", "pydantic_ai/agent/", "pydantic_ai/run"),
    ),
    ("pydantic-ai Model base (prepare_request/messages, parts)", ("pydantic_ai/models/", "pydantic_ai/_parts_manager")),
    ("pydantic-ai other (messages, usage, tools, otel)", ("pydantic_ai/", "genai_prices/", "opentelemetry/")),
    ("httpx2 / httpcore2 / h11 (model request)", ("httpx2/", "httpcore2/", "httpx/", "httpcore/", "h11/", "anyio/")),
    ("pydantic / pydantic-core validation", ("pydantic/", "pydantic_core/", "typing_extensions", "typing.py")),
    ("FastAPI / Starlette", ("fastapi/", "starlette/")),
    ("uvicorn / httptools / uvloop", ("uvicorn/", "httptools/", "uvloop/")),
    ("kora.memory (+ history conversion)", ("kora/memory/", "kora/core/")),
    ("kora.agent", ("kora/agent/",)),
    ("json", ("json/", "~:0(<method 'encode' of '_json", "_json")),
    ("asyncio / contextlib / stdlib", ("asyncio/", "contextlib", "python3.11/", "~")),
]


def group_of(filename: str) -> str:
    for name, needles in GROUPS:
        if any(needle in filename for needle in needles):
            return name
    return "other"


def report_profile(path: str, turns: int, top: int = 25) -> None:
    import pstats

    stats = pstats.Stats(path)
    total = stats.total_tt  # type: ignore[attr-defined]
    by_group: dict[str, float] = {}
    rows = []
    for (filename, line, func), (_cc, calls, tottime, cumtime, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        key = filename if filename != "~" else f"~:{func}"
        group = group_of(key)
        # C builtins ('~') carry no module; attribute the commonest ones by name.
        if filename == "~":
            if "json" in func or "_json" in func:
                group = "json"
            elif "pydantic_core" in func or "SchemaValidator" in func or "SchemaSerializer" in func:
                group = "pydantic / pydantic-core validation"
        by_group[group] = by_group.get(group, 0.0) + tottime
        short = re.sub(r".*site-packages/", "", filename).replace(str(ROOT) + "/", "")
        rows.append((tottime, cumtime, calls, f"{short}:{line}({func})"))
    print(f"\nProfile of the agent server: {turns} turns, {1000 * total / turns:.2f} ms profiled CPU per turn")
    print("(cProfile inflates Python-level calls ~2x; read the shares, not the absolute numbers)\n")
    print(f"  {'where (exclusive time)':<52} {'ms/turn':>8} {'share':>6}")
    for group, seconds in sorted(by_group.items(), key=lambda kv: -kv[1]):
        print(f"  {group:<52} {1000 * seconds / turns:8.3f} {100 * seconds / total:5.1f}%")
    print(f"\n  top {top} functions by exclusive time:")
    print(f"  {'tottime ms/turn':>15} {'cumtime ms/turn':>15} {'calls/turn':>10}  function")
    for tottime, cumtime, calls, where in sorted(rows, reverse=True)[:top]:
        print(f"  {1000 * tottime / turns:15.3f} {1000 * cumtime / turns:15.3f} {calls / turns:10.1f}  {where[:110]}")
    print("\n  cumulative time of entry points (ms/turn):")
    wanted = [
        "chat_completions",
        "parse_chat_request",
        "stream",
        "_history",
        "run_stream_events",
        "request_stream",
        "_process_streamed_response",
        "messages_to_events",
        "events_to_messages",
        "add_events",
        "get_session_events",
        "get_or_create_session",
        "completion_body",
        "create",
        "send",
    ]
    for func in wanted:
        best = max(
            (
                (cumtime, f"{re.sub(r'.*site-packages/', '', filename)}:{line}")
                for (filename, line, name), (_cc, _calls, _tt, cumtime, _c) in stats.stats.items()  # type: ignore[attr-defined]
                if name == func and ("kora" in filename or "pydantic_ai" in filename or "openai" in filename)
            ),
            default=None,
        )
        if best:
            print(f"  {func:<28} {1000 * best[0] / turns:8.3f}  {best[1]}")


# --------------------------------------------------------------------------------------------------
# Orchestration
# --------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer turns (smoke test)")
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--profile-out", metavar="FILE", help="keep the cProfile stats of the agent in FILE")
    parser.add_argument(
        "--text-turn",
        action="store_true",
        help="only the text turn against the floor, printed as a ratio (the quick mode CI runs, ~30-60 s)",
    )
    parser.add_argument(
        "--tracing",
        action="store_true",
        help="the text turn traced (every turn, exported over OTLP/HTTP) against untraced and the floor, ~1-2 min",
    )
    parser.add_argument(
        "--first-content",
        action="store_true",
        help="first streamed content and CPU per streamed turn, agent against the floor and the model, ~1 min",
    )
    parser.add_argument(
        "--tool-turn",
        action="store_true",
        help="an MCP tool-calling turn, agent against pydantic-ai's own floor (pydantic_ai_floor.py), ~1-2 min",
    )
    parser.add_argument(
        "--library-floor",
        action="store_true",
        help="the text turn of the agent against the library floor (library_floor.py) and the floor, ~1-2 min",
    )
    parser.add_argument(
        "--rss",
        action="store_true",
        help="RSS at /ready, after 5k and 20k text turns, start to /health and /ready; ~1 min a run and tree",
    )
    parser.add_argument(
        "--trees",
        default=str(ROOT),
        help="--rss: comma-separated source trees to run the agent from, alternating (default: this one)",
    )
    parser.add_argument("--runs", type=int, default=3, help="alternating runs of --rss")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of --text-turn, --tracing, --first-content")
    parser.add_argument(
        "--before",
        type=Path,
        metavar="TREE",
        help="--tracing: also another tree's traced agent (e.g. a worktree of main)",
    )
    parser.add_argument("--loadgen", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serve-profiled", metavar="OUT", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--turns", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--offset", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--concurrency", type=int, default=CONCURRENCY, help=argparse.SUPPRESS)
    parser.add_argument("--sessions", type=int, default=SESSIONS, help=argparse.SUPPRESS)
    parser.add_argument("--prompt", default="hello number", choices=sorted(EXPECTED), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.loadgen:
        loadgen_main(args)
        return
    if args.serve_profiled:
        serve_profiled(args.serve_profiled)
        return
    if args.text_turn:
        print(text_turn(rounds=args.rounds, turns=args.turns or 1000).line(), flush=True)
        return
    if args.library_floor:
        library_floor(rounds=args.rounds if args.rounds != 3 else 6, turns=args.turns or 600)
        return
    if args.rss:
        rss_growth(args.trees.split(","), runs=args.runs)
        return
    if args.tracing:
        print(tracing_turn(rounds=args.rounds, turns=args.turns or 1000, before=args.before), flush=True)
        return
    if args.first_content:
        print(first_content(rounds=args.rounds, turns=args.turns or 200), flush=True)
        return
    if args.tool_turn:
        print(tool_turn(rounds=args.rounds, turns=args.turns or 500), flush=True)
        return
    bench(quick=args.quick, profile=not args.no_profile, profile_out=args.profile_out)


def bench(quick: bool, profile: bool, profile_out: str | None = None) -> None:
    warmup, measured, total = (200, 1000, 2000) if quick else (500, 4000, 10_000)
    startups = 1 if quick else 3
    began = time.monotonic()
    py = sys.executable
    model_port, agent_port, proxy_port = free_port(), free_port(), free_port()
    model = Server(
        [py, str(HERE / "stamping_model.py")], os.environ | {"MODEL_PORT": str(model_port)}, model_port, None
    )
    agent = Server([py, "-m", "kora.cli", "agent"], agent_env(model_port, agent_port), agent_port, "/ready")
    proxy = Server(
        [py, str(HERE / "baseline_proxy.py")],
        os.environ | {"MODEL_API_URL": f"http://{HOST}:{model_port}/v1", "PROXY_PORT": str(proxy_port)},
        proxy_port,
        None,
    )
    servers = [model, agent, proxy]
    try:
        model.start()
        print(f"bench: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}; starting servers ...", flush=True)

        # 2. Start-up: cold starts of each server (the last agent and proxy stay up for the load).
        agent_starts, proxy_starts = [], []
        for attempt in range(startups):
            agent_starts.append(agent.start())
            proxy_starts.append(proxy.start())
            if attempt < startups - 1:
                agent.stop()
                proxy.stop()
        agent_rss_ready = rss_mb(agent.pid)
        proxy_rss_ready = rss_mb(proxy.pid)

        # 1. CPU per turn and throughput, baseline first.
        print("bench: load on the baseline proxy ...", flush=True)
        run_load(proxy_port, warmup, 0, {})
        base = run_load(proxy_port, measured, warmup, {"server": proxy.pid, "model": model.pid})
        proxy_rss_after = rss_mb(proxy.pid)
        print("bench: load on the agent ...", flush=True)
        run_load(agent_port, warmup, 0, {})
        agent_rss_warm = rss_mb(agent.pid)
        kora = run_load(agent_port, measured, warmup, {"server": agent.pid, "model": model.pid})

        # 3. Memory after `total` turns over 1000 sessions.
        rest = total - warmup - measured
        if rest > 0:
            print(f"bench: {rest} more turns on the agent (memory) ...", flush=True)
            filler = run_load(agent_port, rest, warmup + measured, {"server": agent.pid})
            assert filler["errors"] == 0
        agent_rss_after = rss_mb(agent.pid)
        status, body = http_get(agent_port, "/memory/sessions", timeout=10, token=OPERATOR_TOKEN)
        stored_sessions = json.loads(body)["total"] if status == 200 else None

        # 4. Streaming latency.
        print("bench: streaming latency ...", flush=True)
        streams = asyncio.run(stream_latencies(model_port, agent_port, runs=2 if quick else 5))

        for server in (agent, proxy):
            server.stop()

        # 5. An agent that offers tools (MEMORY_TOOLS=all): the loop is loaded; text turns still end at the
        #    first request, "tool-bench" turns call save_memory and finish in pydantic-ai (2 model requests).
        print("bench: agent with tools: text turns, then tool-calling turns ...", flush=True)
        tools_port = free_port()
        tooled = Server(
            [py, "-m", "kora.cli", "agent"],
            agent_env(model_port, tools_port) | {"MEMORY_TOOLS": "all"},
            tools_port,
            "/ready",
        )
        servers.append(tooled)
        tooled_start = tooled.start()
        tooled_rss_ready = rss_mb(tooled.pid)
        tool_turns = 500 if quick else 2000
        run_load(tools_port, 200, 0, {})
        tooled_text = run_load(tools_port, tool_turns, 200, {"server": tooled.pid})
        run_load(tools_port, 100, 0, {}, prompt="tool-bench")
        tooled_tools = run_load(tools_port, tool_turns // 2, 100, {"server": tooled.pid}, prompt="tool-bench")
        tooled.stop()

        # 6. An agent with one MCP tool server (kora mcp, one inline tool): start-up, memory, and "mcp-bench"
        #    turns (one call of `add` over Streamable HTTP, two model requests). The tool server's CPU is
        #    shown apart from the agent's.
        print("bench: agent with one MCP server: tool-calling turns ...", flush=True)
        mcp_port, mcp_agent_port = free_port(), free_port()
        mcp = Server(
            [py, "-m", "kora.cli", "mcp", "--host", HOST, "--port", str(mcp_port)],
            os.environ | {"MCP_TOOLS_STRING": MCP_TOOLS, "MCP_LOG_LEVEL": "WARNING"},
            mcp_port,
            "/ready",
        )
        servers.append(mcp)
        mcp_start = mcp.start()
        mcp_env = {"MCP_SERVERS": "calc", "MCP_SERVER_CALC_URL": f"http://{HOST}:{mcp_port}"}
        mcp_agent = Server(
            [py, "-m", "kora.cli", "agent"], agent_env(model_port, mcp_agent_port) | mcp_env, mcp_agent_port, "/ready"
        )
        servers.append(mcp_agent)
        mcp_agent_start = mcp_agent.start()
        mcp_agent_rss_ready = rss_mb(mcp_agent.pid)
        run_load(mcp_agent_port, 100, 0, {}, prompt="mcp-bench")
        mcp_turns = run_load(
            mcp_agent_port, tool_turns // 2, 100, {"server": mcp_agent.pid, "tools": mcp.pid}, prompt="mcp-bench"
        )
        mcp_agent.stop()
        floor_port = free_port()
        floor = Server(
            [py, str(HERE / "pydantic_ai_floor.py")],
            os.environ
            | {
                "MODEL_API_URL": f"http://{HOST}:{model_port}/v1",
                "MCP_URL": f"http://{HOST}:{mcp_port}/mcp",
                "FLOOR_PORT": str(floor_port),
            },
            floor_port,
            None,
        )
        servers.append(floor)
        floor.start()
        floor_rss_ready = rss_mb(floor.pid)
        run_load(floor_port, 100, 0, {}, prompt="mcp-bench")
        floor_turns = run_load(
            floor_port, tool_turns // 2, 100, {"server": floor.pid, "tools": mcp.pid}, prompt="mcp-bench"
        )
        floor.stop()
        mcp.stop()

        # 7. Tail latency at concurrency 64: text turns on a fresh agent and on the baseline proxy, same run.
        print(f"bench: tail latency at concurrency {HIGH_CONCURRENCY} ...", flush=True)
        tail_turns = 2000 if quick else 8000
        tail: dict[str, dict] = {}
        for name, server in (("proxy", proxy), ("agent", agent)):
            server.start()
            run_load(server.port, 500, 0, {}, concurrency=HIGH_CONCURRENCY)
            tail[name] = run_load(server.port, tail_turns, 500, {"server": server.pid}, concurrency=HIGH_CONCURRENCY)
            server.stop()

        # Profile.
        profile_turns = 0
        profile_file = None
        profiled_cpu = 0.0
        if profile:
            print("bench: profiling the agent ...", flush=True)
            profile_file = profile_out or str(Path(tempfile.mkdtemp()) / "agent.prof")
            Path(profile_file).write_bytes(b"")
            profiled = Server(
                [py, __file__, "--serve-profiled", profile_file],
                agent_env(model_port, agent_port),
                agent_port,
                "/ready",
            )
            servers.append(profiled)
            profiled.start()
            run_load(agent_port, 200, 0, {})
            profile_turns = 1000
            os.kill(profiled.pid, signal.SIGUSR1)
            prof = run_load(agent_port, profile_turns, 200, {"server": profiled.pid})
            profiled_cpu = prof["cpu_s"]["server"]
            os.kill(profiled.pid, signal.SIGUSR2)
            deadline = time.monotonic() + 30
            while os.path.getsize(profile_file) == 0 and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(0.5)
            profiled.stop()
    finally:
        for server in reversed(servers):
            server.stop()

    # ---- report ----
    def per_turn(result: dict, who: str) -> float:
        return 1000 * result["cpu_s"][who] / result["turns"]

    def med(values: list[float]) -> float:
        return statistics.median(values)

    direct, via = streams["direct"], streams["agent"]
    added = med(via) - med(direct)
    rows = [
        ("Server CPU per chat turn (ms)", "<= 1", per_turn(kora, "server"), per_turn(base, "server"), "{:.2f}"),
        ("Turns/s at concurrency 16", ">= 700", kora["turns_per_s"], base["turns_per_s"], "{:.0f}"),
        (
            "  latency p50 / p99 (ms)",
            "",
            f"{kora['p50_ms']:.1f} / {kora['p99_ms']:.1f}",
            f"{base['p50_ms']:.1f} / {base['p99_ms']:.1f}",
            "{}",
        ),
        ("  model CPU per turn (ms)", "", per_turn(kora, "model"), per_turn(base, "model"), "{:.2f}"),
        (
            "  load generator CPU per turn (ms)",
            "",
            1000 * kora["loadgen_cpu_s"] / kora["turns"],
            1000 * base["loadgen_cpu_s"] / base["turns"],
            "{:.2f}",
        ),
        (
            "Start -> /health answers (s, median)",
            "<= 1",
            med([h for h, _ in agent_starts]),
            med([h for h, _ in proxy_starts]),
            "{:.2f}",
        ),
        ("Start -> /ready answers (s, median)", "", med([r for _, r in agent_starts if r is not None]), "-", "{:.2f}"),
        ("RSS when ready (MB)", "", agent_rss_ready, proxy_rss_ready, "{:.1f}"),
        (f"RSS after {warmup} turns (MB)", "", agent_rss_warm, "-", "{:.1f}"),
        (f"RSS after {total} turns / 1000 sessions (MB)", "<= 100", agent_rss_after, proxy_rss_after, "{:.1f}"),
        ("Stream: model send -> client, median (ms)", "", med(via), med(direct), "{:.2f}"),
        (
            "Stream: model send -> client, p95/max (ms)",
            "",
            f"{sorted(via)[int(len(via) * 0.95)]:.2f} / {max(via):.2f}",
            f"{sorted(direct)[int(len(direct) * 0.95)]:.2f} / {max(direct):.2f}",
            "{}",
        ),
        ("Stream: added latency per chunk (ms)", "<= 1", added, 0.0, "{:.2f}"),
        ("Agent with tools (MEMORY_TOOLS=all):", "", "", "", "{}"),
        ("  start -> /ready (s)", "", tooled_start[1] or 0.0, "-", "{:.2f}"),
        ("  RSS when ready (MB)", "", tooled_rss_ready, "-", "{:.1f}"),
        ("  CPU per text turn (ms)", "", per_turn(tooled_text, "server"), "-", "{:.2f}"),
        ("  CPU per tool-calling turn, 2 requests (ms)", "", per_turn(tooled_tools, "server"), "-", "{:.2f}"),
        ("  tool-calling turns/s", "", tooled_tools["turns_per_s"], "-", "{:.0f}"),
        ("Agent with one MCP server (kora mcp, 1 tool); baseline: pydantic-ai floor", "", "", "", "{}"),
        ("  start -> /ready (s)", "<= 1.5", mcp_agent_start[1] or 0.0, "-", "{:.2f}"),
        ("  kora mcp start -> /health, /ready (s)", "", f"{mcp_start[0]:.2f}, {mcp_start[1] or 0.0:.2f}", "-", "{}"),
        ("  RSS when ready (MB)", "<= 110", mcp_agent_rss_ready, floor_rss_ready, "{:.1f}"),
        (
            "  server CPU per tool-calling turn (ms)",
            "<= 4",
            per_turn(mcp_turns, "server"),
            per_turn(floor_turns, "server"),
            "{:.2f}",
        ),
        ("  tool server CPU per turn (ms)", "", per_turn(mcp_turns, "tools"), per_turn(floor_turns, "tools"), "{:.2f}"),
        ("  tool-calling turns/s", "", mcp_turns["turns_per_s"], floor_turns["turns_per_s"], "{:.0f}"),
        (f"Text turns at concurrency {HIGH_CONCURRENCY}:", "", "", "", "{}"),
        (
            "  latency p50 / p99 (ms)",
            "",
            f"{tail['agent']['p50_ms']:.1f} / {tail['agent']['p99_ms']:.1f}",
            f"{tail['proxy']['p50_ms']:.1f} / {tail['proxy']['p99_ms']:.1f}",
            "{}",
        ),
        ("  p99 / proxy's p99", "<= 2", tail["agent"]["p99_ms"] / tail["proxy"]["p99_ms"], 1.0, "{:.2f}"),
        (
            "  server CPU per turn (ms)",
            "",
            per_turn(tail["agent"], "server"),
            per_turn(tail["proxy"], "server"),
            "{:.2f}",
        ),
    ]

    def fmt(value: object, spec: str) -> str:
        return spec.format(value) if isinstance(value, float | int) else str(value)

    print(
        f"\nAgent server benchmark ({os.cpu_count()} CPUs, loopback, scripted model, {time.monotonic() - began:.0f} s)"
    )
    print(f"{'figure':<46} {'target':>7} {'agent':>14} {'baseline':>14}  verdict")
    for name, target, ours, theirs, spec in rows:
        verdict = ""
        if target and isinstance(ours, float):
            bound = float(target.split()[1])
            verdict = "ok" if (ours <= bound if target.startswith("<=") else ours >= bound) else "MISSED"
        print(f"{name:<46} {target:>7} {fmt(ours, spec):>14} {fmt(theirs, spec):>14}  {verdict}")
    print(
        f"\nLoad: {kora['turns']} measured non-streaming turns after {warmup} warm-up turns, concurrency "
        f"{CONCURRENCY}, sessions bench-0..{SESSIONS - 1} round-robin, failed turns: agent {kora['errors']}, "
        f"baseline {base['errors']}. Baseline = bench/baseline_proxy.py (FastAPI + httpx2 over aiohttp forwarding the "
        f"JSON, the agent's own HTTP stack). Agent with tools: {tooled_text['turns']} text and "
        f"{tooled_tools['turns']} tool-calling turns, failed: {tooled_text['errors'] + tooled_tools['errors']}."
    )
    print(
        "On 2 cores the model and the load generator share the CPUs with the server; the agent serves from one "
        "event loop, so its turns/s is bounded by 1000 / (server CPU per turn in ms)."
    )
    print(f"Memory: the agent stores {stored_sessions} sessions after {total} turns (MEMORY_MAX_SESSIONS=1000).")
    print(
        f"Streaming: {len(via)} chunks ({len(via) // max(1, (2 if quick else 5))} per reply, "
        f"{os.environ.get('STREAM_DELAY', '0.05')} s apart), each timed from the model process's send to this "
        "process's receipt on CLOCK_MONOTONIC (shared by all processes); 'baseline' reads the model directly."
    )
    if profile_file:
        print(f"Profiled agent: {1000 * profiled_cpu / profile_turns:.2f} ms process CPU per turn under cProfile.")
        report_profile(profile_file, profile_turns)
        if not profile_out:
            os.unlink(profile_file)


if __name__ == "__main__":
    main()
