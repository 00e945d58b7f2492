"""Wait until the quickstart's own ``kora up`` has every workload Ready.

    python scripts/quickstart/wait_ready.py STATE_DIR KORA_UP_PID [TIMEOUT_SECONDS]

Exit 0 once ``STATE_DIR/state.json`` belongs to ``KORA_UP_PID`` and every workload in it is Ready; 1 when
that process exits first, or after the timeout (default 120 s) with each workload not Ready and its message
on stderr. Reading the state file, not probing the port, means another ``kora up`` answering on the same
port is never taken for this one.
"""

import sys
import time
from pathlib import Path

from kora.local.state import READY, process_alive, read_state


def main() -> int:
    state_dir, pid = Path(sys.argv[1]), int(sys.argv[2])
    deadline = time.monotonic() + (float(sys.argv[3]) if len(sys.argv) > 3 else 120.0)
    state = None
    while time.monotonic() < deadline:
        if not process_alive(pid):
            return 1
        try:
            state = read_state(state_dir)
        except (FileNotFoundError, ValueError):
            state = None
        ours = state is not None and state.pid == pid
        if ours and state is not None and state.workloads and all(w.phase == READY for w in state.workloads):
            return 0
        time.sleep(0.1)
    for workload in state.workloads if state is not None and state.pid == pid else []:
        if workload.phase != READY:
            print(f"  {workload.kind}/{workload.name}: {workload.phase} {workload.message}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
