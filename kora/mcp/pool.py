"""A pool of tool worker processes with per-call timeouts (the "tools never take the server down" rule).

Why processes: a Python thread cannot be stopped from outside, so a sync tool stuck in a loop or a
blocking call would keep running (and holding a thread) after its timeout; and ``os._exit`` or a crash
in C code inside a thread ends the whole server. A worker process (:mod:`kora.mcp.worker`) can be killed.
So each call goes to an idle worker; when the call's timeout expires, or the caller goes away mid-call,
the worker is killed (SIGKILL) and a fresh one started in the background. What *cannot* be undone: side
effects the tool already made before it was stopped (files written, requests sent).

Each worker runs one call at a time; ``size`` workers run calls in parallel and further calls wait for
a free worker (the wait does not count against the timeout). The event loop never blocks: all pipe
I/O is asynchronous.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kora.core.errors import ToolSourceError
from kora.mcp.worker import HEADER_SIZE, encode_frame, frame_length

logger = logging.getLogger(__name__)

#: Seconds a new worker may take to start and load the tools source.
WORKER_START_TIMEOUT_SECONDS = 30.0
# The worker must import kora even when the server runs from a source checkout that is not installed.
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
#: Seconds a call made before any worker has started waits for one, then fails with a "not ready" error.
FIRST_WORKER_WAIT_SECONDS = 30.0
#: Seconds between attempts to start a worker (first start or replacement) that failed to start.
RESPAWN_DELAY_SECONDS = 1.0


@dataclass(frozen=True)
class CallOutcome:
    """The result of one tool call: ``value`` (JSON data) when ``ok``, else ``error`` (``"Error: ..."`` text).

    ``traceback`` is the worker's (already redacted) traceback of a failed call, for the server's logs.
    """

    ok: bool
    value: Any = None
    error: str = ""
    traceback: str = ""


class _WorkerProcess:
    """One ``python -m kora.mcp.worker`` child and its pipes."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    @classmethod
    async def start(cls, source: str, filename: str) -> _WorkerProcess:
        """Start a worker and have it load ``source``. Raises ``ToolSourceError`` if loading fails."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_PACKAGE_ROOT, env.get("PYTHONPATH", "")]))
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "kora.mcp.worker",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=env,
        )
        worker = cls(process)
        try:
            reply = await asyncio.wait_for(
                worker.request({"op": "load", "source": source, "filename": filename}),
                WORKER_START_TIMEOUT_SECONDS,
            )
        except BaseException:
            worker.kill()
            raise
        if not reply.get("ok"):
            worker.kill()
            raise ToolSourceError(str(reply.get("error", "the worker could not load the tools")))
        return worker

    async def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send one request and wait for its reply. Raises ``asyncio.IncompleteReadError`` if the worker died."""
        stdin, stdout = self.process.stdin, self.process.stdout
        if stdin is None or stdout is None:  # pragma: no cover - always piped by start()
            raise ConnectionError("the worker has no pipes")
        stdin.write(encode_frame(message))
        await stdin.drain()
        header = await stdout.readexactly(HEADER_SIZE)
        body = await stdout.readexactly(frame_length(header))
        reply: dict[str, Any] = json.loads(body)
        return reply

    def kill(self) -> None:
        """Kill the process now (SIGKILL; stops a tool in any state)."""
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()

    async def exit_code(self) -> int | None:
        """The process's exit code once it has ended (negative: killed by that signal)."""
        with contextlib.suppress(TimeoutError):
            return await asyncio.wait_for(self.process.wait(), 5.0)
        return None

    async def close(self) -> None:
        """Ask the worker to exit (close its stdin), kill it if it does not, and reap it."""
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            await asyncio.wait_for(self.process.wait(), 2.0)
        except TimeoutError:
            self.kill()
            await self.process.wait()


class WorkerPool:
    """``size`` worker processes that all loaded ``source``; :meth:`call` runs one tool call on a free one.

    Use ``pool.start()`` before the first call and ``await pool.close()`` at shutdown, both on the event loop
    that makes the calls. Workers start in the background, so the server answers ``/health`` at once; calls
    made before a worker runs wait for one, and :attr:`started` says when every worker has come up.
    """

    def __init__(self, source: str, filename: str, size: int) -> None:
        if size < 1:
            raise ValueError("a worker pool needs at least one worker")
        self._source = source
        self._filename = filename
        self._size = size
        self._idle: asyncio.Queue[_WorkerProcess] | None = None
        self._all: set[_WorkerProcess] = set()
        self._spawning: set[asyncio.Task[None]] = set()
        self._first_starts = 0
        self._closed = False

    @property
    def started(self) -> bool:
        """True once every one of the ``size`` workers has started (and :meth:`close` has not run)."""
        return self._first_starts >= self._size and not self._closed

    def start(self) -> None:
        """Start all workers in parallel, in the background, and return at once. A worker that fails to start
        is logged and tried again every :data:`RESPAWN_DELAY_SECONDS`."""
        self._idle = asyncio.Queue()
        for _ in range(self._size):
            self._spawn(None)

    def _spawn(self, replacing: _WorkerProcess | None) -> None:
        task = asyncio.get_running_loop().create_task(self._add_worker(replacing))
        self._spawning.add(task)
        task.add_done_callback(self._spawning.discard)

    async def call(self, tool: str, args: dict[str, Any], time_limit: float) -> CallOutcome:
        """Run ``tool(**args)`` on a free worker; give up and kill the worker after ``time_limit`` seconds.

        Never raises for a tool's failure: an exception, a timeout or a crash come back as a
        ``CallOutcome`` with ``ok=False`` and an ``"Error: ..."`` text. Cancelling the caller kills the worker.
        """
        not_ready = CallOutcome(ok=False, error="Error: the tool server is not ready (its workers are not running)")
        if self._idle is None or self._closed:
            return not_ready
        try:
            # Busy workers free up by themselves; workers that have never started may never come (bounded).
            wait = None if self.started else FIRST_WORKER_WAIT_SECONDS
            worker = await asyncio.wait_for(self._idle.get(), wait)
        except TimeoutError:
            return not_ready
        healthy = False
        try:
            reply = await asyncio.wait_for(worker.request({"op": "call", "tool": tool, "args": args}), time_limit)
            healthy = True
        except TimeoutError:
            return CallOutcome(
                ok=False, error=f"Error: tool {tool!r} did not finish within {time_limit:g} s and was stopped"
            )
        except (asyncio.IncompleteReadError, ConnectionError):
            code = await worker.exit_code()
            return CallOutcome(
                ok=False, error=f"Error: tool {tool!r} crashed: its worker process exited (exit code {code})"
            )
        finally:
            if healthy:
                self._idle.put_nowait(worker)
            else:
                # Timed out, crashed or cancelled mid-call: the worker's state is unknown, so replace it.
                self._retire(worker)
        if reply.get("ok"):
            return CallOutcome(ok=True, value=reply.get("value"))
        return CallOutcome(
            ok=False, error=f"Error: {reply.get('error', 'unknown error')}", traceback=reply.get("traceback", "")
        )

    def _retire(self, worker: _WorkerProcess) -> None:
        worker.kill()
        self._all.discard(worker)
        self._spawn(worker)

    async def _add_worker(self, replacing: _WorkerProcess | None) -> None:
        if replacing is not None:
            await replacing.process.wait()  # reap the killed process
        while not self._closed:
            try:
                worker = await _WorkerProcess.start(self._source, self._filename)
            except Exception:
                logger.exception("could not start a tool worker; retrying in %g s", RESPAWN_DELAY_SECONDS)
                await asyncio.sleep(RESPAWN_DELAY_SECONDS)
                continue
            if self._closed or self._idle is None:
                await worker.close()
                return
            self._all.add(worker)
            self._idle.put_nowait(worker)
            if replacing is None:
                self._first_starts += 1
            return

    async def close(self) -> None:
        """Stop every worker and pending replacement; calls made afterwards fail with an error outcome."""
        self._closed = True
        for task in list(self._spawning):
            task.cancel()
        await asyncio.gather(*self._spawning, return_exceptions=True)
        await asyncio.gather(*(worker.close() for worker in self._all), return_exceptions=True)
        self._all.clear()
