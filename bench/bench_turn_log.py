"""The per-turn cost of the agent's turn log line (kora.agent.turn_log.log_turn): CPU per call, in microseconds.

    python bench/bench_turn_log.py [--calls 50000]

A tool turn's messages (prompt, a response calling one tool, the tool's result, the answer), logged through the
agent server's own logging set-up (``logging.basicConfig`` with its format) to a file, as ``kora up`` and a pod's
log collector receive it; then with INFO off (``AGENT_LOG_LEVEL=WARNING``), where the call returns at once.
CPU time of this process (``time.process_time``), median of 5 rounds.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time

from pydantic_ai.messages import (
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.usage import RunUsage

from kora.agent.turn import TurnRequest
from kora.agent.turn_log import log_turn

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"  # kora/agent/cli.py's


def per_call_us(calls: int, turn: TurnRequest, messages: list, usage: RunUsage) -> float:
    rounds = []
    for _ in range(5):
        began = time.process_time()
        for _ in range(calls):
            log_turn(turn, messages, usage, "stop")
        rounds.append((time.process_time() - began) / calls * 1e6)
    return statistics.median(rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=50_000)
    calls = parser.parse_args().calls
    turn = TurnRequest(session_id="3f2a9c1e-bench", prompt="what is 2 plus 3")
    messages = [
        ModelRequest(parts=[UserPromptPart("what is 2 plus 3")]),
        ModelResponse(parts=[ToolCallPart("add", {"a": 2, "b": 3}, "call-1")]),
        ModelRequest(parts=[ToolReturnPart("add", 5, "call-1")]),
        ModelResponse(parts=[TextPart("2 plus 3 is 5.")]),
    ]
    usage = RunUsage(requests=2, input_tokens=41, output_tokens=9)
    with tempfile.NamedTemporaryFile("w", suffix=".log") as out:
        logging.basicConfig(level="INFO", format=FORMAT, stream=out)
        on = per_call_us(calls, turn, messages, usage)
        logging.getLogger().setLevel("WARNING")
        off = per_call_us(calls, turn, messages, usage)
    print(f"log_turn, INFO on (a line to a file): {on:.1f} us per turn")
    print(f"log_turn, INFO off:                   {off:.2f} us per turn")


if __name__ == "__main__":
    main()
