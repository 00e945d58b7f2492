"""Whether a process exists, by its id: what ``kora up`` asks of the workloads it started and the embedded Postgres
asks of the processes holding its server."""

from __future__ import annotations

import os

__all__ = ["process_alive"]


def process_alive(pid: int) -> bool:
    """Whether a process with ``pid`` exists (signal 0 probe; a zombie counts as alive, and so does a process of
    another user, which the probe may not signal)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return True
