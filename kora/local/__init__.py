"""The local runtime: ``kora up | status | logs | down | chat``.

- :mod:`kora.local.up`: load manifests, plan on loopback ports, run the gateway and the supervisor.
- :mod:`kora.local.gateway`: the cluster gateway's path scheme on 127.0.0.1 (prefix stripped, streaming).
- :mod:`kora.local.supervisor`: workloads as child processes (dependency order, probes, restart back-off).
- :mod:`kora.local.state`: the state file shared by ``kora up`` and the other commands.
- :mod:`kora.local.cli`: the commands: ``kora up``, ``kora status``, ``kora logs``, ``kora down``, ``kora chat``,
  ``kora token``.

Other packages (the console) import from this package's face, never from its modules.
"""

from kora.local.credentials import read_credentials
from kora.local.state import Link, UpState, WorkloadState, read_state

__all__ = [
    "Link",
    "UpState",
    "WorkloadState",
    "read_credentials",
    "read_state",
]
