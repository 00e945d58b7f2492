"""The test node's own scripts: ``start-node.sh`` brings up a node where a pod runs, and ``stop-node.sh`` leaves
nothing of it behind (process, mount, iptables rule, bridge, cgroup, sysctl), also when run twice or first.

Looked at from outside the scripts, with the host's own tools, so a stop script that only claimed to be clean
would fail here.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.node import require_node, start_node, stop_node, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.node, pytest.mark.slow]

POD = """\
apiVersion: v1
kind: Pod
metadata: {name: sandbox-only}
spec:
  containers:
  - {name: pause, image: localhost/kora-node/pause:1, imagePullPolicy: Never}
"""
SYSCTLS = ["net.ipv4.ip_forward", "net.bridge.bridge-nf-call-iptables", "vm.overcommit_memory", "kernel.panic"]


def _sysctls() -> dict[str, str]:
    found = {}
    for name in SYSCTLS:
        path = Path("/proc/sys") / name.replace(".", "/")
        if path.exists():
            found[name] = path.read_text().strip()
    return found


def _traces(directory: Path) -> list[str]:
    """Everything of a node in ``directory`` that the host still shows."""
    traces = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(directory) in command and int(proc.name) != os.getpid():
            traces.append(f"process {proc.name}: {command[:120]}")
    mounts = Path("/proc/self/mounts").read_text().splitlines()
    traces += [f"mount {line.split()[1]}" for line in mounts if line.split()[1].startswith(f"{directory}/")]
    if subprocess.run(["ip", "link", "show", "kora0"], capture_output=True, check=False).returncode == 0:
        traces.append("bridge kora0")
    rules = subprocess.run(["iptables-save"], capture_output=True, text=True, check=False).stdout
    traces += [f"iptables {line}" for line in rules.splitlines() if "KUBE-" in line or "CNI-" in line][:5]
    # cgroup v1 (one hierarchy per controller) and v2 (one unified hierarchy).
    traces += [
        f"cgroup {path}"
        for path in [*Path("/sys/fs/cgroup").glob("*/kubepods"), Path("/sys/fs/cgroup/kubepods")]
        if path.exists()
    ]
    return traces


def test_a_node_runs_a_pod_and_stopping_it_leaves_nothing_behind(tmp_path: Path) -> None:
    require_node()
    directory = tmp_path / "node"
    before = _sysctls()
    # Safe first, on a directory where nothing runs (what a clean-up after a killed run does).
    assert stop_node(directory).returncode == 0
    cluster = start_node(directory)
    try:
        cluster.kubectl("apply", "-f", "-", stdin=POD)
        wait_for(
            lambda: cluster.kubectl("get", "pod", "sandbox-only", "-o", "jsonpath={.status.phase}").stdout == "Running",
            "the pod Running",
        )
        assert _traces(directory), "a running node shows on the host"
    finally:
        stopped = stop_node(directory)
    assert stopped.returncode == 0, stopped.stderr
    assert _traces(directory) == []
    assert _sysctls() == before
    # The logs stay for a look; nothing else does.
    assert {path.suffix for path in directory.iterdir()} <= {".log"}
    assert stop_node(directory).returncode == 0
