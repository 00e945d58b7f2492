"""Official npm clients (the ``openai`` SDK, the MCP TypeScript SDK) run under Node against Kora's servers: each
package is installed once into a cache by its script under ``scripts/``, and the test's client script runs next to
that cache's ``node_modules``."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path


def run_node_client(install: Path, client: Path, *args: str, timeout: float = 120) -> str:
    """Install the package with the ``install`` script (it prints its ``node_modules`` directory last), then run
    ``node client ARGS`` and return its stdout. ``AssertionError`` naming the reason when Node is missing, the
    install fails or the client exits non-zero."""
    assert shutil.which("node"), "Node.js is needed to run the npm client"
    installed = subprocess.run(["bash", str(install)], capture_output=True, text=True, check=False, timeout=600)
    assert installed.returncode == 0, installed.stderr
    modules = Path(installed.stdout.strip().splitlines()[-1])
    # ES modules resolve packages from the script's folder up: run a copy next to the cached node_modules.
    script = modules.parent / client.name
    script.write_text(client.read_text())
    run = subprocess.run(
        ["node", str(script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=os.environ | {"NODE_NO_WARNINGS": "1"},
        check=False,
    )
    assert run.returncode == 0, run.stderr
    return run.stdout
