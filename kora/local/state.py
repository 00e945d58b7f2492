"""The state file ``kora up`` writes and ``kora status | logs | down | chat`` read.

``<state dir>/state.json`` (default state dir ``.kora`` in the current directory)::

    {"pid": 1234, "gateway_url": "http://127.0.0.1:8080", "started_at": 1763700000.0, "stopped": false,
     "workloads": [{"name", "kind", "namespace", "phase", "message", "pid", "restarts",
                    "gateway_url", "direct_url", "log", "note",
                    "links": [{"relation", "kind", "name"}, ...]}, ...]}

Phases: ``Pending`` (not started yet), ``Waiting`` (started or waiting for a dependency; ``message``
says which), ``Ready`` (its readiness probe answered 200), ``Failed`` (exited or cannot run; ``message``
says why and when it restarts); ``Stopped`` is what readers show for every workload of a ``kora up`` that
no longer runs (:meth:`UpState.as_stopped`). The file is replaced atomically (write + rename), so a reader
never sees half of it.

Finding the run (:func:`locate`): ``kora status | logs | chat | down`` without ``--state-dir`` look at
``.kora`` and each ``.kora/*/`` (``scripts/quickstart.sh`` keeps its run in ``.kora/quickstart``) and take
the one whose ``kora up`` is alive; when none is, the most recently started one (to show its logs and say
that nothing runs); when several are, they list them and ask for ``--state-dir``.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from kora.core.processes import process_alive

__all__ = [
    "DEFAULT_STATE_DIR",
    "FAILED",
    "PENDING",
    "READY",
    "STOPPED",
    "WAITING",
    "Link",
    "Located",
    "UpState",
    "WorkloadState",
    "locate",
    "process_alive",
    "read_state",
    "render_table",
    "state_file",
    "write_state",
]

DEFAULT_STATE_DIR = Path(".kora")
PENDING, WAITING, READY, FAILED, STOPPED = "Pending", "Waiting", "Ready", "Failed", "Stopped"


@dataclass(frozen=True)
class Link:
    """An edge of the resource graph from a workload to a resource of its namespace: ``relation`` as
    :func:`kora.resources.graph.links_of` names it (``model``, ``tools``, ``delegates``, ``memory``, ...)."""

    relation: str
    kind: str
    name: str


@dataclass
class WorkloadState:
    """One workload as last seen by the supervisor. ``pid`` is None while no process runs; ``links`` are the
    resources it uses (its ModelAPI, tool servers, peers it may delegate to, memory store)."""

    name: str
    kind: str
    namespace: str
    gateway_url: str
    direct_url: str
    log: str
    note: str = ""
    phase: str = PENDING
    message: str = ""
    pid: int | None = None
    restarts: int = 0
    links: list[Link] = field(default_factory=list)


@dataclass
class UpState:
    """The whole run: the ``kora up`` process id, the gateway's base URL and every workload in start order."""

    pid: int
    gateway_url: str
    started_at: float
    workloads: list[WorkloadState] = field(default_factory=list)
    stopped: bool = False

    def workload(self, name: str) -> WorkloadState:
        """The workload called ``name`` (``kind/name`` or ``namespace/kind/name`` also accepted for clashes).

        Raises ``KeyError`` listing the known names when none or several match."""
        matches = [
            w
            for w in self.workloads
            if name in {w.name, f"{w.kind}/{w.name}", f"{w.kind.lower()}/{w.name}", f"{w.namespace}/{w.kind}/{w.name}"}
        ]
        if len(matches) != 1:
            known = ", ".join(f"{w.kind}/{w.name}" for w in self.workloads)
            problem = "is ambiguous" if matches else "is not a workload"
            raise KeyError(f"{name!r} {problem}; workloads: {known}")
        return matches[0]

    @property
    def running(self) -> bool:
        """Whether its ``kora up`` still runs: not marked stopped and the process alive (one killed with
        SIGKILL never marks its state stopped)."""
        return not self.stopped and process_alive(self.pid)

    def as_stopped(self) -> UpState:
        """A copy as a reader shows a ``kora up`` that no longer runs: every workload ``Stopped``, no pid."""
        workloads = [replace(w, phase=STOPPED, message="", pid=None) for w in self.workloads]
        return replace(self, workloads=workloads)


def state_file(state_dir: Path) -> Path:
    """``<state_dir>/state.json``."""
    return state_dir / "state.json"


def write_state(state_dir: Path, state: UpState) -> None:
    """Replace the state file atomically (``OSError`` when the directory is not writable)."""
    path = state_file(state_dir)
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps(asdict(state), indent=2), encoding="utf-8")
    os.replace(temporary, path)


def read_state(state_dir: Path) -> UpState:
    """The last state written; ``FileNotFoundError`` when ``kora up`` never ran there, ``ValueError`` when the
    file is not a state file."""
    raw = json.loads(state_file(state_dir).read_text(encoding="utf-8"))
    try:
        workloads = [
            WorkloadState(**{**item, "links": [Link(**link) for link in item.get("links", [])]})
            for item in raw.pop("workloads")
        ]
        return UpState(workloads=workloads, **raw)
    except (KeyError, TypeError) as error:
        raise ValueError(f"{state_file(state_dir)} is not a kora up state file: {error}") from None


def render_table(state: UpState) -> str:
    """A plain-text table of the workloads: NAME, KIND, PHASE, GATEWAY URL, DIRECT URL, NOTE (one line each),
    then each non-Ready workload's message."""
    header = ("NAME", "KIND", "PHASE", "GATEWAY URL", "DIRECT URL", "NOTE")
    rows = [header] + [(w.name, w.kind, w.phase, w.gateway_url, w.direct_url, w.note) for w in state.workloads]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines += [f"  {w.kind}/{w.name}: {w.message}" for w in state.workloads if w.phase != READY and w.message]
    return "\n".join(lines)


@dataclass(frozen=True)
class Located:
    """The run a command acts on: its state dir and last state."""

    state_dir: Path
    state: UpState


def locate(state_dir: Path | None, root: Path = DEFAULT_STATE_DIR) -> Located:
    """The ``kora up`` run to act on (see the module docstring for the rule).

    ``state_dir``: the one the user named (``--state-dir``), taken as is; None to search ``root`` and its
    direct sub-directories. Raises ``FileNotFoundError`` when there is no state file at all,
    ``ValueError`` when a state file is not one or several runs are alive (the message lists them with the
    ``--state-dir`` to pick each). Messages are for the user, without the command's name.
    """
    if state_dir is not None:
        try:
            return Located(state_dir, read_state(state_dir))
        except FileNotFoundError:
            raise FileNotFoundError(f"no kora up state in {state_dir} (start one with: kora up <manifests>)") from None
    candidates = [root, *sorted(path for path in root.glob("*/") if path.is_dir())]
    found = [Located(path, read_state(path)) for path in candidates if state_file(path).is_file()]
    if not found:
        raise FileNotFoundError(
            f"no kora up state in {root} or {root}/*/: nothing runs here (start one with: kora up <manifests>)"
        )
    alive = [located for located in found if located.state.running]
    if len(alive) > 1:
        runs = "; ".join(f"--state-dir {r.state_dir} (pid {r.state.pid}, {r.state.gateway_url})" for r in alive)
        raise ValueError(f"{len(alive)} kora up runs here; pick one with {runs}")
    return alive[0] if alive else max(found, key=lambda located: located.state.started_at)
