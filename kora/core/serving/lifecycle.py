"""A workload's start-up, run in the background of its app's lifespan: starting, then started or failed.

Every Kora server answers ``/health`` from its first moment and loads what is slow (a runtime, a database, a
model) afterwards. :class:`Lifecycle` runs that start-up as one task, keeps what became of it, lets a request
wait for it (:meth:`Lifecycle.wait`, 503 after :data:`STARTUP_WAIT_SECONDS`) or ask without waiting
(:meth:`Lifecycle.check`), and says what ``/ready`` reports about it (:meth:`Lifecycle.readiness`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from kora.core.errors import Unavailable

log = logging.getLogger("kora.serving")

#: Seconds a request waits for the start-up to end before answering 503 (code ``starting``).
STARTUP_WAIT_SECONDS = 30.0


class Status(StrEnum):
    """What ``/ready`` says in its ``status``: only :attr:`READY` answers 200."""

    STARTING = "starting"  #: the start-up still runs
    FAILED = "failed"  #: the start-up failed; the process stays up to say why
    NOT_READY = "not_ready"  #: started, but something it needs is away now (``reasons`` say what)
    READY = "ready"


@dataclass(frozen=True)
class Readiness:
    """One answer of ``/ready``: ``status``, the ``reasons`` it is not ready (empty when ready) and ``details``
    that do not make it unready (e.g. ``{"memory": "degraded: ..."}``)."""

    status: Status
    reasons: list[str] = field(default_factory=list)
    details: Mapping[str, str | int] = field(default_factory=dict)

    @property
    def http_status(self) -> int:
        """200 when ready, else 503."""
        return 200 if self.status is Status.READY else 503

    def body(self) -> dict[str, object]:
        """The JSON body: ``{"status": ..., "reasons": [...], "details": {...}}``, ``reasons`` and ``details`` only
        when not empty (a ready workload with nothing degraded answers ``{"status": "ready"}``)."""
        body: dict[str, object] = {"status": self.status.value}
        if self.reasons:
            body["reasons"] = list(self.reasons)
        if self.details:
            body["details"] = dict(self.details)
        return body


@dataclass(frozen=True)
class StartupText:
    """How a workload names its start-up: ``subject`` in 503 messages ("The agent" is still starting),
    ``starting`` and ``failed`` as ``/ready`` reasons (``failed`` is followed by ``": <error>"``), and the
    ``codes`` of the 503 while starting and after a failure."""

    subject: str
    starting: str
    failed: str
    codes: tuple[str, str] = ("starting", "startup_failed")


class Lifecycle:
    """Runs ``start`` once in the background (:meth:`begin`, from the app's lifespan) and keeps its outcome.

    ``start`` may raise: the error is logged and kept (:attr:`error`, ``"TypeName: message"``), and the process
    keeps serving so that ``/ready`` and every request can say why. ``wait_seconds`` bounds :meth:`wait`.
    """

    def __init__(
        self,
        start: Callable[[], Awaitable[None]],
        text: StartupText,
        *,
        wait_seconds: float = STARTUP_WAIT_SECONDS,
        describe: Callable[[Exception], str] | None = None,
    ) -> None:
        self._start = start
        self.text = text
        self.wait_seconds = wait_seconds
        self._describe = describe or (lambda error: f"{type(error).__name__}: {error}")
        self.error: str | None = None
        self._done = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def begin(self) -> None:
        """Start the start-up as a task of the running event loop (once)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"kora-start: {self.text.subject}")

    async def _run(self) -> None:
        try:
            await self._start()
        except Exception as error:  # kept and reported on /ready and to every request, not raised
            log.exception("%s failed to start", self.text.subject)
            self.error = self._describe(error)
        except asyncio.CancelledError:  # stopped before it finished: never taken for started
            self.error = "cancelled before it finished"
            raise
        finally:
            self._done.set()

    async def run(self) -> None:
        """Run the start-up here and now (what :meth:`begin` runs as a task); never raises."""
        await self._run()

    @property
    def status(self) -> Status:
        """:attr:`Status.STARTING`, :attr:`Status.FAILED` or (started) :attr:`Status.READY`."""
        if not self._done.is_set():
            return Status.STARTING
        return Status.FAILED if self.error is not None else Status.READY

    @property
    def started(self) -> bool:
        """True once the start-up has ended without error."""
        return self._done.is_set() and self.error is None

    def check(self) -> None:
        """Raise :class:`~kora.core.errors.Unavailable` (503) now unless started: code ``codes[0]`` while
        starting, ``codes[1]`` after a failure."""
        status = self.status
        if status is Status.STARTING:
            raise Unavailable(f"{self.text.subject} is still starting.", code=self.text.codes[0])
        if status is Status.FAILED:
            raise Unavailable(f"{self.text.subject} failed to start: {self.error}", code=self.text.codes[1])

    async def wait(self) -> None:
        """Wait up to ``wait_seconds`` for the start-up to end, then :meth:`check`."""
        if not self._done.is_set():
            with contextlib.suppress(TimeoutError):  # still starting: check() says so
                await asyncio.wait_for(self._done.wait(), self.wait_seconds)
        self.check()

    def problems(self) -> list[str]:
        """Why the start-up makes the workload unready (empty once started)."""
        status = self.status
        if status is Status.STARTING:
            return [self.text.starting]
        if status is Status.FAILED:
            return [f"{self.text.failed}: {self.error}"]
        return []

    def readiness(self, problems: Iterable[str] = (), details: Mapping[str, str | int] | None = None) -> Readiness:
        """What ``/ready`` answers: the start-up's state first; once started, ``problems`` (what the workload
        needs and lacks now) make it :attr:`Status.NOT_READY`."""
        reasons = self.problems() or list(problems)
        status = self.status
        if status is Status.READY and reasons:
            status = Status.NOT_READY
        return Readiness(status, reasons, details or {})

    async def close(self) -> None:
        """Wait for the start-up task to end (a stop during start-up lets it finish, as it cannot be undone). A
        start-up that was cancelled (its work dropped before it began) ends it quietly too."""
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
