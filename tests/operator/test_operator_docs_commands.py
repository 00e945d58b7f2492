"""The commands docs/operator.md gives users run as written (the one that needs a cluster: test_operator_docs.py)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "operator.md"


def shell_blocks() -> list[str]:
    """Every ```sh block of docs/operator.md, in order."""
    return [block.strip() for block in re.findall(r"```sh\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)]


def shell_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default ``os.environ``) with this checkout's ``kora`` first on PATH and its code imported."""
    environment = dict(os.environ if base is None else base)
    environment["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{environment.get('PATH', '')}"
    environment["PYTHONPATH"] = str(REPO)
    return environment


def run_block(block: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``block`` run by bash (:func:`shell_env`, plus ``env``), within 60 s."""
    environment = {**shell_env(), **(env or {})}
    return subprocess.run(["bash", "-c", block], env=environment, capture_output=True, text=True, timeout=60)


def test_the_doc_has_the_blocks_these_tests_run():
    blocks = shell_blocks()
    assert len(blocks) == 3, blocks
    assert blocks[0] == "kora operator --help"
    assert blocks[1].startswith("KORA_IMAGE=")
    assert " kora operator --namespace demo" in blocks[1]
    assert blocks[2] == "env -u KORA_IMAGE kora operator"


def test_help_lists_every_option_the_doc_names():
    result = run_block(shell_blocks()[0])
    assert result.returncode == 0, result.stderr
    for option in (
        "--namespace",
        "--webhook-port",
        "--webhook-host",
        "--webhook-service",
        "--no-webhook",
        "--log-level",
    ):
        assert option in result.stdout
        assert f"`{option}" in DOC.read_text(encoding="utf-8")


def test_a_missing_image_stops_start_up_with_the_message_the_doc_shows():
    result = run_block(shell_blocks()[2], env={"KORA_IMAGE": "ignored: the block unsets it"})
    assert result.returncode == 2
    doc = DOC.read_text(encoding="utf-8")
    for line in result.stderr.strip().splitlines():
        assert line.strip() in doc, line
