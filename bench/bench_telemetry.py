"""What telemetry costs an agent per turn: telemetry off, on (exporting spans and metrics over OTLP/HTTP to a
receiver), and a baseline agent from a commit before telemetry existed, measured in the same run.

Run: ``python bench/bench_telemetry.py`` (about 3 minutes on 2 cores; loopback only). ``--quick`` runs fewer
turns; ``--baseline-ref REV`` picks the baseline commit (default: the last commit before telemetry); ``--no-baseline``
skips it. The baseline is checked out with ``git worktree`` into a temporary directory and run from there with the
same Python and packages.

Processes (127.0.0.1): the scripted model (``bench/stamping_model.py``), one ``kora agent`` per variant (local
memory, no tools), an OTLP/HTTP receiver in this process (it answers every export with an empty success, so the
exporter's work is real and the receiver's is not in the agent's figures), and the load generator of
``bench_agent.py`` (16 connections, non-streaming text turns, 1000 sessions round-robin). CPU per turn is the
agent process's utime+stime over the measured turns; the variants are measured in alternating rounds so drift
of a shared machine falls on all of them alike, and the median round is shown.

Goals: off equals the baseline within noise; on adds <= 0.3 ms per text turn.

The same run also measures the floor under that goal: the OpenTelemetry SDK alone (``--sdk-floor``, a process
that makes the four spans of a text turn, with the attributes Kora gives them, through
:func:`kora.core.telemetry.setup_telemetry` and exports them to the same receiver, with no server, model or
agent), in CPU per span tree, the exporter thread's included.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_agent import HERE, HOST, ROOT, Server, agent_env, run_load

from kora.core.net import free_port

#: The last commit before the agent had telemetry: the baseline of "off".
DEFAULT_BASELINE = "72aed21"
#: The row of the SDK's own cost for a text turn's spans.
FLOOR = "SDK floor: a text turn's 4 spans, made and exported, no server"


class _Receiver(BaseHTTPRequestHandler):
    """Accepts OTLP/HTTP exports (``/v1/traces``, ``/v1/metrics``) and answers an empty success; counts them."""

    exports: dict[str, int] = {}

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        self.rfile.read(length)
        _Receiver.exports[self.path] = _Receiver.exports.get(self.path, 0) + 1
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


def sdk_floor(trees: int) -> float:
    """CPU ms per span tree of a text turn made with the SDK alone, exported over OTLP/HTTP (the child process of
    ``--sdk-floor``; ``OTEL_EXPORTER_OTLP_ENDPOINT`` must be set)."""
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind

    from kora.core.telemetry import setup_telemetry

    telemetry = setup_telemetry("Agent", "floor")
    assert telemetry.tracer_provider is not None, "--sdk-floor needs OTEL_EXPORTER_OTLP_ENDPOINT"
    tracer = trace.get_tracer("bench")
    server_attributes = {
        "http.request.method": "POST",
        "url.scheme": "http",
        "url.path": "/v1/chat/completions",
        "server.address": HOST,
        "server.port": 8000,
        "network.peer.address": HOST,
        "network.peer.port": 50000,
        "network.protocol.version": "1.1",
        "user_agent.original": "python-httpx/0.28.1",
    }
    genai = {"gen_ai.provider.name": "openai", "gen_ai.request.model": "scripted"}
    usage = {
        "gen_ai.usage.input_tokens": 12,
        "gen_ai.usage.output_tokens": 6,
        "gen_ai.response.finish_reasons": ["stop"],
    }

    def tree(i: int) -> None:
        # server > invoke_agent > step 1 > chat: the spans of a text turn, with the attributes Kora gives them.
        with tracer.start_as_current_span("POST", kind=SpanKind.SERVER, attributes=server_attributes) as server:
            turn_attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "bench", **genai}
            with tracer.start_as_current_span("invoke_agent bench", attributes=turn_attributes) as turn:
                turn.set_attribute("gen_ai.conversation.id", f"session-{i % 1000}")
                with tracer.start_as_current_span("step 1", attributes={"kora.turn.step": 1}):
                    chat_attributes = {"gen_ai.operation.name": "chat", **genai, "server.address": HOST}
                    with tracer.start_as_current_span(
                        "chat scripted", kind=SpanKind.CLIENT, attributes=chat_attributes
                    ) as chat:
                        chat.set_attributes(
                            {"gen_ai.response.model": "scripted", "gen_ai.response.id": f"chatcmpl-{i}", **usage}
                        )
                turn.set_attributes({**usage, "kora.turn.model_requests": 1})
            server.update_name("POST /v1/chat/completions")
            server.set_attributes({"http.route": "/v1/chat/completions", "http.response.status_code": 200})

    for i in range(trees // 4):  # warm-up
        tree(i)
    telemetry.tracer_provider.force_flush()
    started = time.process_time()
    for i in range(trees):
        tree(i)
    telemetry.tracer_provider.force_flush()
    return (time.process_time() - started) / trees * 1000


def baseline_checkout(ref: str, into: Path) -> Path:
    """A work tree of ``ref`` (``git worktree add --detach``) under ``into``."""
    path = into / "baseline"
    subprocess.run(["git", "worktree", "add", "--detach", "-q", str(path), ref], cwd=ROOT, check=True)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--baseline-ref", default=DEFAULT_BASELINE)
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--sdk-floor", type=int, metavar="TREES", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sdk_floor:
        print(json.dumps(sdk_floor(args.sdk_floor)))
        return
    rounds, warmup, measured = (2, 300, 1000) if args.quick else (3, 500, 2000)

    receiver = ThreadingHTTPServer((HOST, 0), _Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    endpoint = f"http://{HOST}:{receiver.server_address[1]}"

    model_port = free_port()
    model_env = os.environ | {"MODEL_PORT": str(model_port)}
    model = Server([sys.executable, str(HERE / "stamping_model.py")], model_env, model_port, None)
    tmp = tempfile.TemporaryDirectory(prefix="kora-bench-telemetry-")
    variants: dict[str, Server] = {}
    baseline_tree: Path | None = None
    try:
        model.start()

        def agent(name: str, extra: dict[str, str], source: Path = ROOT) -> Server:
            port = free_port()
            env = {key: value for key, value in agent_env(model_port, port).items() if not key.startswith("OTEL_")}
            env |= {"PYTHONPATH": str(source), "AGENT_NAME": f"bench-{name}"} | extra
            server = Server([sys.executable, "-m", "kora.cli", "agent"], env, port, "/ready")
            server.start()
            return server

        variants["off"] = agent("off", {})
        variants["on"] = agent("on", {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_BSP_SCHEDULE_DELAY": "500"})
        if not args.no_baseline:
            baseline_tree = baseline_checkout(args.baseline_ref, Path(tmp.name))
            variants["baseline"] = agent("baseline", {}, baseline_tree)
        print(f"bench: {len(variants)} agents up; {rounds} rounds x {measured} turns each", flush=True)
        for server in variants.values():
            run_load(server.port, warmup, 0, {})
        per_turn: dict[str, list[float]] = {name: [] for name in variants}
        offset = warmup
        for _ in range(rounds):
            for name, server in variants.items():
                result = run_load(server.port, measured, offset, {"agent": server.pid})
                assert result["errors"] == 0, result
                per_turn[name].append(result["cpu_s"]["agent"] / measured * 1000)
            offset += measured
            floor_env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
            floor_env |= {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_BSP_SCHEDULE_DELAY": "500"}
            floor = subprocess.run(
                [sys.executable, __file__, "--sdk-floor", str(measured)],
                env=floor_env | {"PYTHONPATH": str(ROOT)},
                check=True,
                capture_output=True,
                text=True,
            )
            per_turn.setdefault(FLOOR, []).append(json.loads(floor.stdout))
        medians = {name: statistics.median(values) for name, values in per_turn.items()}
        print()
        print("| agent | CPU per text turn, median (ms) | rounds (ms) |")
        print("|---|---|---|")
        for name, value in medians.items():
            rounds_text = " / ".join(f"{v:.3f}" for v in per_turn[name])
            print(f"| {name} | {value:.3f} | {rounds_text} |")
        print()
        print(f"on - off: {medians['on'] - medians['off']:+.3f} ms per turn (goal <= 0.3 ms)")
        print(f"{FLOOR}: {medians[FLOOR]:.3f} ms")
        if "baseline" in medians:
            print(f"off - baseline ({args.baseline_ref}): {medians['off'] - medians['baseline']:+.3f} ms per turn")
        print(f"OTLP exports received: {dict(_Receiver.exports)}")
        if not _Receiver.exports.get("/v1/traces"):
            raise SystemExit("bench: the 'on' agent exported no spans")
    finally:
        for server in [*variants.values(), model]:
            server.stop()
        receiver.shutdown()
        if baseline_tree is not None:
            subprocess.run(["git", "worktree", "remove", "--force", str(baseline_tree)], cwd=ROOT, check=False)
        tmp.cleanup()


if __name__ == "__main__":
    main()
