"""Two versions of the agent against each other on the text turn, in one run: the agent of another tree (``--old``,
e.g. a ``git worktree add /tmp/old <rev>``) and this tree's, with one scripted model and one floor.

Run: ``python bench/compare_turn.py --old /tmp/old [--rounds 16] [--turns 600]`` (~1 min on 2 cores).

Each agent runs as ``python -m kora.cli agent`` with its own tree as working directory and ``PYTHONPATH`` (Python
puts the working directory first on ``sys.path``, so both are needed). Rounds of ``--turns`` non-streaming text
turns (a fresh session each, concurrency 16) alternate over old, new and the floor, after a warm-up round of each
(``bench_agent.cpu_rounds``). Printed: seconds to ``/health`` and ``/ready``, each server's CPU per turn (median and
every round, ms, from ``/proc``), the ratios to the floor, the new-minus-old difference of each round and its
median (pairing by round takes out most of what the other load on a shared machine does to both), RSS after the
load, the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_agent import HERE, ROOT, Server, agent_env, cpu_rounds, floor_server, free_port, rss_mb, wait_status


class TreeAgent(Server):
    """``kora agent`` of the tree ``tree`` (its working directory and ``PYTHONPATH``)."""

    def __init__(self, tree: Path, model_port: int) -> None:
        port = free_port()
        env = agent_env(model_port, port) | {"PYTHONPATH": str(tree)}
        super().__init__([sys.executable, "-m", "kora.cli", "agent"], env, port, "/ready")
        self.tree = tree

    def start(self) -> tuple[float, float | None]:
        started = time.monotonic()
        self.proc = subprocess.Popen(self.argv, env=self.env, cwd=self.tree, stdout=subprocess.DEVNULL)
        healthy = wait_status(self.port, "/health", started + 60)
        ready = wait_status(self.port, "/ready", started + 60)
        return healthy - started, ready - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, required=True, help="the other tree (a worktree of an older commit)")
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--turns", type=int, default=600)
    args = parser.parse_args()
    model_port, floor_port = free_port(), free_port()
    model = Server(
        [sys.executable, str(HERE / "stamping_model.py")],
        os.environ | {"MODEL_PORT": str(model_port)},
        model_port,
        None,
    )
    floor = floor_server(model_port, floor_port)
    agents = {"old": TreeAgent(args.old.resolve(), model_port), "new": TreeAgent(ROOT, model_port)}
    try:
        model.start()
        floor_health, _ = floor.start()
        starts = {name: agent.start() for name, agent in agents.items()}
        print(
            f"start to /health: floor {floor_health:.2f} s; "
            + "; ".join(f"{name} {h:.2f} s (/ready {r or 0:.2f} s)" for name, (h, r) in starts.items())
        )
        load_before = os.getloadavg()[0]
        per_round = cpu_rounds({**agents, "floor": floor}, model, args.rounds, args.turns)
        floor_ms = statistics.median(per_round["floor"])
        for name in ("old", "new", "floor"):
            rounds = " ".join(f"{ms:.3f}" for ms in per_round[name])
            median = statistics.median(per_round[name])
            print(f"{name:5s} {median:.3f} ms CPU per turn ({median / floor_ms:.2f}x the floor); rounds {rounds}")
        differences = [new - old for old, new in zip(per_round["old"], per_round["new"], strict=True)]
        print(
            f"new - old: median {statistics.median(differences):+.3f} ms "
            f"(rounds {' '.join(f'{d:+.3f}' for d in differences)})"
        )
        print(
            "RSS after the load: "
            + ", ".join(f"{name} {rss_mb(s.pid):.0f} MB" for name, s in (*agents.items(), ("floor", floor)))
            + f"; load average {load_before:.1f} -> {os.getloadavg()[0]:.1f}"
        )
    finally:
        for server in (*agents.values(), floor, model):
            server.stop()


if __name__ == "__main__":
    main()
