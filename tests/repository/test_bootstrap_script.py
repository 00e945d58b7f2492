"""scripts/bootstrap.sh run in a copy of the repository's install inputs, with a stand-in for the venv's python
that records each pip call: it says when it installs, and extras installed once stay counted (the quickstart
after scripts/test.sh must not reinstall)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
#: Records its arguments, one call a line: what pip would have been asked.
FAKE_PYTHON = '#!/bin/sh\necho "$*" >> "$(dirname "$0")/../calls"\n'


def checkout(tmp_path: Path) -> Path:
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "bootstrap.sh", tmp_path / "scripts")
    for name in ("pyproject.toml", "constraints.txt"):
        shutil.copy(REPO / name, tmp_path)
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    return tmp_path


def bootstrap(root: Path, *extras: str) -> tuple[list[str], str]:
    """Run it; the pip installs it asked for (package specs only) and what it said on stderr."""
    calls = root / ".venv" / "calls"
    calls.unlink(missing_ok=True)
    done = subprocess.run(
        ["bash", "scripts/bootstrap.sh", *extras], cwd=root, capture_output=True, text=True, timeout=60, check=True
    )
    lines = calls.read_text().splitlines() if calls.exists() else []
    return [line.split()[-1] for line in lines if "-e" in line.split()], done.stderr


def test_extras_installed_once_stay_counted_until_the_pins_change(tmp_path: Path):
    root = checkout(tmp_path)
    installs, said = bootstrap(root, "embeddings")
    assert installs == [".[dev,embeddings]"]
    assert said.startswith("bootstrap: installing Kora and its pinned dependencies [dev,embeddings] into .venv")
    assert said.splitlines()[-1].startswith("bootstrap: installed in ")
    # The quickstart after the test suite: nothing to do, nothing said.
    assert bootstrap(root) == ([], "")
    assert bootstrap(root, "embeddings") == ([], "")
    # New pins: everything installed before is installed again with them.
    with (root / "constraints.txt").open("a") as constraints:
        constraints.write("\n# changed\n")
    assert bootstrap(root)[0] == [".[dev,embeddings]"]
