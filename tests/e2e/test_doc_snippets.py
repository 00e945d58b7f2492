"""Every code block of README.md and docs/*.md that a user would paste runs, against a real `kora up` of the
quickstart (one per module), so a snippet cannot silently go wrong again.

How a block runs (see tests/support/doc_blocks.py for which blocks count):

- ``python``: as a script, in a directory where ``kora up examples/quickstart`` runs with its default
  state dir; the docs' addresses are rewritten to the running quickstart's (the gateway's port 8080 to the
  free port it got, an agent's own ``http://localhost:8000`` to the quickstart agent's direct URL).
- ``sh`` whose every line is a ``kora`` command: line by line, each as a user types it in a second terminal
  (``kora up examples/quickstart`` is the quickstart already running; ``kora chat`` is given a question on
  stdin; ``-f`` is stopped with Ctrl-C once it printed). The block holding ``kora down`` runs last.
- any other ``sh``: as one bash script with ``set -euo pipefail``.

A block marked ``<!-- not-tested: REASON -->`` is left out (tests/repository/test_doc_blocks.py checks that the
marker gives a reason).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kora.core.net import free_port
from kora.local.state import UpState, read_state
from tests.support.doc_blocks import REPO, Block, blocks, documentation
from tests.support.eventually import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

#: Pages whose blocks other tests run: docs/operator.md's need a Kubernetes API server.
RUN_ELSEWHERE = {
    "docs/operator.md": "tests/operator/test_operator_docs_commands.py, tests/operator/test_operator_docs.py, "
    "tests/operator/test_helm_chart.py"
}
QUESTION = "what is 2 plus 3\n"


def _runnable() -> list[Block]:
    found = [
        block
        for page in documentation()
        for block in blocks(page)
        if block.runnable and block.not_tested is None and block.path not in RUN_ELSEWHERE
    ]
    # `kora down` stops the module's quickstart: its block goes last.
    return sorted(found, key=lambda block: "kora down" in block.code)


BLOCKS = _runnable()


@dataclass
class Quickstart:
    """The running quickstart: its directory (the cwd of every block), environment and gateway port."""

    cwd: Path
    env: dict[str, str]
    port: int
    process: subprocess.Popen[bytes]

    def state(self) -> UpState:
        return read_state(self.cwd / ".kora")

    def rewrite(self, code: str) -> str:
        """The block with the docs' addresses pointing at this quickstart."""
        agent = next(w for w in self.state().workloads if w.name == "assistant")
        return code.replace("127.0.0.1:8080", f"127.0.0.1:{self.port}").replace(
            "http://localhost:8000", agent.direct_url.rstrip("/")
        )


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Quickstart]:
    cwd = tmp_path_factory.mktemp("user")
    (cwd / "examples").symlink_to(REPO / "examples")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENT_", "MODEL_", "MCP_", "MEMORY_", "KORA_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(REPO)
    port = free_port()
    with open(cwd / "up.out", "wb") as out:
        process = subprocess.Popen(
            ["kora", "up", "examples/quickstart", "--port", str(port)],
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    running = Quickstart(cwd, env, port, process)
    try:

        def ready() -> bool:
            assert process.poll() is None, (cwd / "up.out").read_text()
            return all(w.phase == "Ready" for w in running.state().workloads)

        explain = (cwd / "up.out").read_text
        eventually(ready, "every workload Ready", every=0.1, tolerate=(FileNotFoundError, ValueError), explain=explain)
        yield running
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)


def _run(command: list[str], block: Block, quickstart: Quickstart) -> str:
    """``command`` run in the quickstart's directory; its output, after checking it exited 0."""
    done = subprocess.run(command, cwd=quickstart.cwd, env=quickstart.env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{block} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _run_python(block: Block, quickstart: Quickstart) -> None:
    script = quickstart.cwd / "snippet.py"
    script.write_text(quickstart.rewrite(block.code), encoding="utf-8")
    _run([sys.executable, str(script)], block, quickstart)


def _run_script(block: Block, quickstart: Quickstart) -> None:
    out = _run(["bash", "-c", "set -euo pipefail\n" + quickstart.rewrite(block.code)], block, quickstart)
    # JSON-RPC's own errors (-32700 parse error ... -32600 invalid request, -32603 internal) mean the snippet is
    # wrong; an A2A answer such as -32002 (a finished task cannot be cancelled) is what the doc shows.
    assert not re.search(r'"code":\s*-32[67]\d\d', out), f"{block} answered an error:\n{out}"


def _command_lines(code: str) -> list[list[str]]:
    return [words for line in code.splitlines() if (words := shlex.split(line, comments=True))]


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _run_kora_line(words: list[str], block: Block, quickstart: Quickstart) -> str:
    """One ``kora`` command as a user types it; returns what it printed."""
    if words[:2] == ["kora", "up"]:
        assert words[2:] == ["examples/quickstart"], f"{block}: the module runs `kora up examples/quickstart`"
        assert quickstart.process.poll() is None
        return ""
    command = shlex.join(words)
    if "-f" in words or "--follow" in words:
        follower = subprocess.Popen(
            words,
            cwd=quickstart.cwd,
            env=quickstart.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            # A terminal's Ctrl-C disposition: a suite started in the background (`cmd &`) runs with SIGINT
            # ignored, which children inherit, and Python then never turns SIGINT into KeyboardInterrupt.
            preexec_fn=_default_sigint,
        )
        assert follower.stdout is not None
        first = follower.stdout.readline()
        follower.send_signal(signal.SIGINT)  # the user's Ctrl-C
        rest, errors = follower.communicate(timeout=30)
        assert follower.returncode == 0, f"{block}: `{command}` exited {follower.returncode}: {errors.decode()}"
        return (first + rest).decode()
    stdin = QUESTION if words[:2] == ["kora", "chat"] else ""
    done = subprocess.run(
        words, cwd=quickstart.cwd, env=quickstart.env, input=stdin, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, f"{block}: `{command}` exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _run_kora_lines(block: Block, quickstart: Quickstart) -> None:
    for words in _command_lines(quickstart.rewrite(block.code)):
        printed = _run_kora_line(words, block, quickstart)
        if words[:2] == ["kora", "chat"]:
            assert "2 plus 3 is 5." in printed
        if words[:2] == ["kora", "status"]:
            assert "assistant" in printed
            assert "Ready" in printed
        if words[:2] == ["kora", "down"]:
            assert quickstart.process.wait(timeout=30) == 0
            after = subprocess.run(
                ["kora", "status"], cwd=quickstart.cwd, env=quickstart.env, capture_output=True, text=True, timeout=60
            )
            assert after.returncode == 1
            assert "kora status: nothing runs" in after.stderr
            assert "Ready" not in after.stdout


@pytest.mark.parametrize("block", BLOCKS, ids=str)
def test_the_block_runs_as_written(block: Block, quickstart: Quickstart):
    if block.language == "python":
        _run_python(block, quickstart)
    elif all(line.startswith("kora ") for line in block.code.splitlines() if line.strip()):
        _run_kora_lines(block, quickstart)
    else:
        _run_script(block, quickstart)
