"""Run workloads as child processes, the way a kubelet runs pods: in dependency order, probed, restarted.

One asyncio task per workload (:class:`Supervisor`):

1. ``Pending`` -> ``Waiting`` while a MemoryStore an Agent is bound to (``waitForDependencies``) is not
   ``Ready``: such an agent must not start with degraded memory. Every other
   dependency gates readiness only (step 3), so a workload's process starts at once, in parallel with what
   it depends on: an agent imports its libraries while its model and tool servers start, and its own tool
   client reconnects to a server that was not listening yet;
2. start ``python -m kora.cli <plan.args>`` in its working directory (the plan's ``files`` written there),
   with the plan's environment and :func:`kora.local.orphans.workload_mark`, stdout and stderr appended to
   its log file, in a new process group (so a Ctrl-C in the terminal reaches only ``kora up``, which then
   stops the children in order) and, on Linux, with SIGTERM from the kernel should ``kora up`` die without
   stopping it (:func:`kora.local.orphans.die_with_parent`: a ``kora up`` killed with SIGKILL leaves no
   workload behind);
3. poll the readiness probe (every :data:`EARLY_PROBE_INTERVAL` seconds for the first
   :data:`EARLY_PROBE_SECONDS` after a start, then every :data:`PROBE_INTERVAL`): ``Ready`` once it answers
   200 *and* every dependency is Ready (``Waiting``, naming them, until then);
   ``Waiting`` again when the probe fails after having been Ready or a dependency stops being Ready
   (dependents are not stopped, as in Kubernetes);
4. when the process exits: ``Failed`` ("exited with code N: <its log's last line>; restarting ..."; the line only
   when it exited by itself, :func:`last_log_line`), restart at once the first
   time, then after a back-off for repeated crashes (1 s, 2 s, 4 s, ... capped at 30 s; reset once a run
   lasted :data:`BACKOFF_RESET_SECONDS`), go to 1.

:meth:`Supervisor.update` applies a new set of plans while running (``kora up --watch``): removed
workloads stop, changed ones restart, new ones start, the others keep their process.

:meth:`Supervisor.stop` ends every task: each process group gets SIGTERM, then SIGKILL after
``grace_seconds``. Workloads that cannot run here (a ModelAPI Hosted model Kora does not host, a ``modelPath``
that holds no model here, or a model whose optional extra is not installed:
:func:`kora.resources.hosted_models.hosted_problem`) go straight to ``Failed`` with the reason and are never
started.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import BinaryIO

import httpx

from kora.core.env import MODEL_HOSTED_MODEL, MODEL_HOSTED_MODEL_PATH
from kora.core.text import last_line
from kora.local.orphans import die_with_parent, workload_mark
from kora.local.state import FAILED, PENDING, READY, WAITING, UpState, WorkloadState
from kora.resources import Kind, ResourceRef, WorkloadPlan, hosted_problem

__all__ = [
    "BACKOFF_RESET_SECONDS",
    "EARLY_PROBE_INTERVAL",
    "EARLY_PROBE_SECONDS",
    "LAST_LINE_CHARS",
    "MAX_BACKOFF_SECONDS",
    "PROBE_INTERVAL",
    "Supervisor",
    "backoff_delays",
    "last_log_line",
    "start_gates",
]

PROBE_INTERVAL = 0.2
#: Right after a start the probe is asked more often: a refused loopback connection costs ~nothing, and a
#: workload Ready 0.15 s sooner lets its dependants be Ready sooner (measured in bench/bench_up.py).
EARLY_PROBE_INTERVAL = 0.05
EARLY_PROBE_SECONDS = 5.0
MAX_BACKOFF_SECONDS = 30.0
#: A run that lasted this long counts as healthy: the next crash restarts after 1 s again.
BACKOFF_RESET_SECONDS = 60.0
#: What a workload inherits from the shell that runs ``kora up``, as a pod gets from its image: where programs,
#: the home and temporary directories are, the locale and time zone, where Python finds Kora (a source
#: checkout) and CA certificates, where caches live (``XDG_*``; the hosted model's ``HF_HOME``, ``HF_HUB_*``
#: cache and offline switches). Never credentials: a key exported in the shell (``OPENAI_API_KEY``) stays there,
#: out of reach of inline tools; name it with ``kora up --pass-env NAME`` to hand it on.
INHERITED_NAMES = frozenset(
    {
        "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TEMP", "TMP",
        "PYTHONPATH", "SSL_CERT_FILE", "SSL_CERT_DIR", "HF_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE",
    }
)  # fmt: skip
#: Name prefixes inherited as well: locale categories and the XDG base directories.
INHERITED_PREFIXES = ("LC_", "XDG_")


def backoff_delays(first: float = 1.0, cap: float = MAX_BACKOFF_SECONDS) -> list[float]:
    """The restart delays in seconds, one per crash in a row: ``[0, 1, 2, 4, 8, 16, 30]``.

    The first crash restarts at once (a workload killed once, e.g. by the OOM killer or by hand, is back as
    fast as it starts); only repeated crashes wait, doubling from ``first`` up to ``cap``."""
    delays = [0.0, first]
    while delays[-1] < cap:
        delays.append(min(delays[-1] * 2, cap))
    return delays


def start_gates(plan: WorkloadPlan) -> tuple[ResourceRef, ...]:
    """The dependencies that must be Ready before ``plan``'s process starts: an Agent's bound MemoryStore
    (present in ``depends_on`` only with ``waitForDependencies``: the agent stays in Waiting until the
    MemoryStore is Ready, so it does not start degraded). Every other dependency gates readiness only."""
    if plan.kind != Kind.AGENT.value:
        return ()
    return tuple(dep for dep in plan.depends_on if dep.kind == Kind.MEMORY_STORE.value)


def child_environment(
    base: Mapping[str, str], plan_env: Mapping[str, str], pass_env: Collection[str] = ()
) -> dict[str, str]:
    """A workload's environment: the minimal part of ``base`` (:data:`INHERITED_NAMES`,
    :data:`INHERITED_PREFIXES`) and the variables of ``base`` named in ``pass_env`` (``kora up --pass-env``),
    then ``plan_env`` (the wiring and the workload's own settings, which win), then unbuffered output (logs
    appear at once). Nothing else of ``base`` reaches the workload."""
    passed = set(pass_env)
    env = {k: v for k, v in base.items() if k in INHERITED_NAMES or k in passed or k.startswith(INHERITED_PREFIXES)}
    return env | dict(plan_env) | {"PYTHONUNBUFFERED": "1"}


class Supervisor:
    """Supervise the workloads of ``plans`` (start order) and keep ``state`` up to date.

    ``environments`` maps each ref to its resolved environment; ``on_change`` is called (in the event loop)
    after every phase change, e.g. to rewrite the state file. :meth:`run` returns after :meth:`stop` once
    every process is gone. ``pass_env`` names variables of this process's environment every workload gets
    besides the minimal set (see :func:`child_environment`). ``state.workloads`` holds one entry per plan
    (the caller adds and removes them around :meth:`update`).
    """

    def __init__(
        self,
        plans: Mapping[ResourceRef, WorkloadPlan],
        environments: Mapping[ResourceRef, Mapping[str, str]],
        state: UpState,
        work_dirs: Mapping[ResourceRef, Path],
        *,
        on_change: Callable[[], None] = lambda: None,
        grace_seconds: float = 5.0,
        pass_env: Collection[str] = (),
    ) -> None:
        self.plans: dict[ResourceRef, WorkloadPlan] = dict(plans)
        self.pass_env = tuple(pass_env)
        self.environments: dict[ResourceRef, Mapping[str, str]] = dict(environments)
        self.state = state
        self.work_dirs: dict[ResourceRef, Path] = dict(work_dirs)
        self.on_change = on_change
        self.grace_seconds = grace_seconds
        self._by_ref: dict[ResourceRef, WorkloadState] = {}
        self._index_state()
        self._processes: dict[ResourceRef, asyncio.subprocess.Process] = {}
        self._tasks: dict[ResourceRef, asyncio.Task[None]] = {}
        self._client: httpx.AsyncClient | None = None
        self._stopping = asyncio.Event()
        # Set (and replaced) on every phase change: a dependant waiting on a dependency's phase wakes at once.
        self._changed = asyncio.Event()

    def _index_state(self) -> None:
        self._by_ref = {
            ref: next(w for w in self.state.workloads if (w.kind, w.namespace, w.name) == ref) for ref in self.plans
        }

    def _set(self, ref: ResourceRef, phase: str, message: str = "") -> None:
        workload = self._by_ref[ref]
        if (workload.phase, workload.message) != (phase, message):
            workload.phase, workload.message = phase, message
            self._changed.set()
            self._changed = asyncio.Event()
            self.on_change()

    def all_ready(self) -> bool:
        """Whether every workload is Ready."""
        return all(w.phase == READY for w in self._by_ref.values())

    def stop(self) -> None:
        """Ask every workload to stop (idempotent, safe from a signal handler via the loop)."""
        self._stopping.set()

    async def run(self) -> None:
        """Supervise until :meth:`stop`; then terminate every child and return."""
        async with httpx.AsyncClient(timeout=2.0, trust_env=False) as client:
            self._client = client
            for ref in self.plans:
                self._launch(ref)
            await self._stopping.wait()
            await asyncio.gather(*(self._terminate(ref) for ref in list(self._processes)))
            tasks = list(self._tasks.values())
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            # A process started while the first sweep ran is still registered (its task was cancelled).
            await asyncio.gather(*(self._terminate(ref) for ref in list(self._processes)))

    async def update(
        self,
        plans: Mapping[ResourceRef, WorkloadPlan],
        environments: Mapping[ResourceRef, Mapping[str, str]],
        work_dirs: Mapping[ResourceRef, Path],
        restart: Collection[ResourceRef],
    ) -> None:
        """Supervise ``plans`` from now on (``kora up --watch``), once :meth:`run` has started.

        Workloads no longer in ``plans`` are stopped (SIGTERM, SIGKILL after the grace period) and those in
        ``restart`` are stopped and started again with their new plan; new ones start. Every other workload
        keeps its process: only its plan object is replaced (a new gateway route timeout needs no restart).
        ``state.workloads`` must already hold an entry for every new ref; entries of removed refs may be
        dropped by the caller once this returns."""
        gone = [ref for ref in self.plans if ref not in plans or ref in restart]
        await asyncio.gather(*(self._retire(ref) for ref in gone))
        self.plans = dict(plans)
        self.environments = dict(environments)
        self.work_dirs = dict(work_dirs)
        self._index_state()
        if self._stopping.is_set():
            return
        for ref in self.plans:
            if ref not in self._tasks:
                self._launch(ref)

    def _launch(self, ref: ResourceRef) -> None:
        assert self._client is not None  # set by run() before any launch
        self._tasks[ref] = asyncio.create_task(self._supervise(ref, self._client), name=str(ref))

    async def _retire(self, ref: ResourceRef) -> None:
        """End ``ref``'s supervision and its process (for a removal or a restart with a new plan)."""
        task = self._tasks.pop(ref, None)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await self._terminate(ref)
        workload = self._by_ref.get(ref)
        if workload is not None:
            workload.pid = None
            self._set(ref, PENDING)

    async def _sleep(self, seconds: float) -> bool:
        """Sleep unless stopping; True when stopping."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)
        return self._stopping.is_set()

    async def _supervise(self, ref: ResourceRef, client: httpx.AsyncClient) -> None:
        plan = self.plans[ref]
        problem = (
            hosted_problem(plan.env_value(MODEL_HOSTED_MODEL) or "", plan.env_value(MODEL_HOSTED_MODEL_PATH))
            if plan.args[0] == "model-hosted"
            else None
        )
        if problem is not None:
            # Restarting would only repeat it: the model is not one Kora hosts, its path holds none, or its extra
            # is missing.
            self._set(ref, FAILED, problem)
            return
        delays = backoff_delays()
        attempt = 0
        while not self._stopping.is_set():
            if await self._wait_for(plan, start_gates(plan)):
                return
            started = time.monotonic()
            try:
                process = await self._start(ref, plan)
            except OSError as error:
                self._set(ref, FAILED, f"cannot start: {error}")
                return
            prober = asyncio.create_task(self._probe(ref, plan, client))
            try:
                code = await process.wait()
            finally:
                prober.cancel()
            self._by_ref[ref].pid = None
            self._processes.pop(ref, None)
            _kill_group(process.pid, signal.SIGKILL)  # stragglers of the old run (e.g. tool worker processes)
            if self._stopping.is_set():
                return
            if time.monotonic() - started >= BACKOFF_RESET_SECONDS:
                attempt = 0
            delay = delays[min(attempt, len(delays) - 1)]
            attempt += 1
            self._by_ref[ref].restarts += 1
            when = f"restarting in {delay:g} s" if delay else "restarting now"
            # A program that exited by itself usually said why last; a signal's victim did not.
            said = last_log_line(Path(self._by_ref[ref].log)) if code > 0 else None
            why = f": {said}" if said else ""
            self._set(ref, FAILED, f"exited with code {code}{why}; {when} (see {plan.name} log)")
            if delay and await self._sleep(delay):
                return

    def _not_ready(self, deps: Collection[ResourceRef]) -> list[ResourceRef]:
        return [dep for dep in deps if dep in self._by_ref and self._by_ref[dep].phase != READY]

    def _waiting_message(self, missing: Collection[ResourceRef]) -> str:
        return "waiting for " + ", ".join(f"{dep.kind}/{dep.name} ({self._by_ref[dep].phase})" for dep in missing)

    async def _wait_for(self, plan: WorkloadPlan, deps: Collection[ResourceRef]) -> bool:
        """Wait until every one of ``deps`` is Ready; True when stopping meanwhile."""
        while missing := self._not_ready(deps):
            self._set(plan.ref, WAITING, self._waiting_message(missing))
            changed = self._changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), PROBE_INTERVAL)
            if self._stopping.is_set():
                return True
        return False

    async def _start(self, ref: ResourceRef, plan: WorkloadPlan) -> asyncio.subprocess.Process:
        work_dir = self.work_dirs[ref]
        work_dir.mkdir(parents=True, exist_ok=True)
        for name, text in plan.files.items():
            (work_dir / name).write_text(text, encoding="utf-8")
        workload = self._by_ref[ref]
        with _open_log(Path(workload.log), f"--- kora up: starting {' '.join(plan.args)}") as log:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "kora.cli",
                *plan.args,
                cwd=work_dir,
                # The mark tells this workload from a stranger that gets its pid later (kora.local.orphans).
                env=child_environment(os.environ, self.environments[ref], self.pass_env) | workload_mark(work_dir),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
                # Forked here, on the event loop's thread, which lives as long as kora up: the kernel sends
                # the parent-death signal when the forking *thread* ends.
                preexec_fn=die_with_parent(),
            )
        self._processes[ref] = process
        workload.pid = process.pid
        self._set(ref, WAITING, f"started (pid {process.pid}); waiting for {plan.probes.readiness}")
        self.on_change()
        return process

    async def _probe(self, ref: ResourceRef, plan: WorkloadPlan, client: httpx.AsyncClient) -> None:
        """Ask the readiness probe and set the phase until cancelled: Ready when it answers 200 and every
        dependency is Ready."""
        url = plan.direct_url.rstrip("/") + plan.probes.readiness
        started = time.monotonic()
        while True:
            try:
                probed = (await client.get(url)).status_code == 200
            except httpx.HTTPError:
                probed = False
            if self._stopping.is_set():
                return  # a probe failing because we are stopping it is not news
            # The current plan: a reload may change what it depends on without restarting it.
            missing = self._not_ready(self.plans[ref].depends_on if ref in self.plans else plan.depends_on)
            if probed and not missing:
                self._set(ref, READY)
            elif missing:
                # Whether or not its own probe answers yet: what it waits for is the news (an agent whose tool
                # server failed may never answer its probe, and "waiting for /ready" would hide why).
                self._set(ref, WAITING, self._waiting_message(missing))
            elif not probed and self._by_ref[ref].phase == READY:
                self._set(ref, WAITING, f"readiness probe {plan.probes.readiness} failing")
            early = time.monotonic() - started < EARLY_PROBE_SECONDS
            interval = 1.0 if self._by_ref[ref].phase == READY else EARLY_PROBE_INTERVAL if early else PROBE_INTERVAL
            # A dependency's change (its Ready) is news for this workload's phase: wake for it.
            changed = self._changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), interval)

    async def _terminate(self, ref: ResourceRef) -> None:
        process = self._processes.get(ref)
        if process is None:
            return
        _kill_group(process.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), self.grace_seconds)
        except TimeoutError:
            _kill_group(process.pid, signal.SIGKILL)
            await process.wait()
        _kill_group(process.pid, signal.SIGKILL)  # anything the leader left behind in its group
        self._processes.pop(ref, None)
        if ref in self._by_ref:
            self._by_ref[ref].pid = None


#: Characters of a log's last line a Failed message quotes at most.
LAST_LINE_CHARS = 120
#: Bytes read from the end of a log to find its last line.
_LOG_TAIL_BYTES = 8192


def last_log_line(path: Path, limit: int = LAST_LINE_CHARS) -> str | None:
    """The last non-blank line of the log at ``path`` that is not ``kora up``'s own (its ``--- kora up:`` run
    headers), whitespace condensed and cut to ``limit`` characters (ending ``...``); None when there is none or
    the log cannot be read. For a crashed workload it is usually the reason (a traceback's exception line)."""
    try:
        with path.open("rb") as log:
            log.seek(max(0, log.seek(0, os.SEEK_END) - _LOG_TAIL_BYTES))
            tail = log.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    return last_line(tail, limit, skip_prefix="--- kora up:")


def _open_log(path: Path, header: str) -> BinaryIO:
    # Appending: the log keeps every run of the workload, each after a header line, like `kubectl logs -p`.
    log = open(path, "ab")  # noqa: SIM115 - the caller closes it once the child holds its own descriptor
    log.write(f"{header} ({time.strftime('%H:%M:%S')})\n".encode())
    log.flush()
    return log


def _kill_group(pgid: int, sig: signal.Signals) -> None:
    # Each child leads its own process group (start_new_session), so the group id is its pid.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
