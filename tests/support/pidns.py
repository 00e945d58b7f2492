"""A command in a PID namespace of its own, as a container runs it: its pids start at 1, and killing it (SIGKILL)
kills every process it started, whatever session they moved to (the embedded Postgres's server among them), as a
container runtime, the OOM killer or a lost node does. Needs root (or ``sudo -n``) for ``unshare --pid``.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

AS_ROOT: list[str] = [] if os.geteuid() == 0 else ["sudo", "-n"]

# Run as the namespace's init: occupy pid $1 (unless empty) with a sleeping process first, then exec the command.
_INIT = """
if [ -n "$1" ]; then echo $(($1 - 1)) > /proc/sys/kernel/ns_last_pid; sleep 100000 & fi
shift
exec "$@"
"""


def start_in_pid_namespace(
    args: list[str], env: Mapping[str, str], log: Path, occupy_pid: int | None = None
) -> subprocess.Popen[bytes]:
    """Start ``args`` with exactly ``env`` as its environment in a new PID namespace (with its own ``/proc``),
    output appended to ``log``. ``occupy_pid``: a pid that a sleeping process of the namespace takes before the
    command starts, as a restarted container's processes take the pids its predecessor's had. The returned
    process is ``unshare``; :func:`kill_namespace` kills everything inside."""
    environment = [f"{name}={value}" for name, value in env.items()]
    command = [
        *AS_ROOT,
        *["env", "-i", *environment],
        *["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"],
        *["sh", "-c", _INIT, "init", str(occupy_pid or ""), *args],
    ]
    with log.open("ab") as output:
        return subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)


def kill_namespace(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL ``unshare``: its child, the namespace's init, gets SIGKILL with it, and the kernel kills every other
    process of the namespace when its init dies."""
    subprocess.run([*AS_ROOT, "kill", "-KILL", str(process.pid)], check=True)
    process.wait(timeout=30)
