"""kora.operator.queue.WorkQueue: coalescing, one worker per key, re-run after a change mid-reconcile, retry with
back-off (its schedule on virtual loop time)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from kora.operator.queue import WorkQueue

pytestmark = pytest.mark.unit


async def _running(queue: WorkQueue[str]) -> asyncio.Task[None]:
    task = asyncio.create_task(queue.run())
    await asyncio.sleep(0)
    return task


async def _stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def test_a_burst_of_adds_is_reconciled_once():
    seen: list[str] = []

    async def handler(key: str) -> None:
        seen.append(key)

    queue: WorkQueue[str] = WorkQueue(handler, workers=2)
    for _ in range(10):
        queue.add("a")
    queue.add("b")
    task = await _running(queue)
    await asyncio.wait_for(queue.wait_idle(), 10)
    await _stop(task)
    assert sorted(seen) == ["a", "b"]


async def test_an_add_during_a_reconcile_runs_it_again_after_and_never_in_parallel():
    release = asyncio.Event()
    started = asyncio.Event()
    active = 0
    most = 0
    runs = 0

    async def handler(key: str) -> None:
        nonlocal active, most, runs
        active += 1
        most = max(most, active)
        runs += 1
        started.set()
        if runs == 1:
            await release.wait()
        active -= 1

    queue: WorkQueue[str] = WorkQueue(handler, workers=4)
    task = await _running(queue)
    queue.add("a")
    await asyncio.wait_for(started.wait(), 10)
    queue.add("a")
    queue.add("a")
    release.set()
    await asyncio.sleep(0)
    await asyncio.wait_for(queue.wait_idle(), 10)
    await _stop(task)
    assert (runs, most) == (2, 1)


async def test_a_failed_reconcile_is_retried_with_backoff():
    attempts = 0
    done = asyncio.Event()

    async def handler(key: str) -> None:
        nonlocal attempts
        attempts += 1
        if attempts < 3:
            raise RuntimeError("API server away")
        done.set()

    queue: WorkQueue[str] = WorkQueue(handler, base_backoff=0.01)
    task = await _running(queue)
    queue.add("a")
    await asyncio.wait_for(done.wait(), 10)
    await _stop(task)
    queue.close()
    assert attempts == 3


# The retry schedule with the real defaults, on virtual time (looptime: the loop's clock jumps to the next timer,
# so a minute of back-off takes no real time and every delay is exact).


class Flaky:
    """A handler that fails while ``failures`` is above zero (one failure used per call), noting the loop time
    of every call in ``attempts``; ``succeeded`` is set by a call that did not fail."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.attempts: list[float] = []
        self.succeeded = asyncio.Event()

    async def __call__(self, key: str) -> None:
        self.attempts.append(asyncio.get_running_loop().time())
        if self.failures > 0:
            self.failures -= 1
            raise RuntimeError("API server away")
        self.succeeded.set()

    def gaps(self) -> list[float]:
        """Seconds between consecutive calls."""
        return [round(later - earlier, 6) for earlier, later in zip(self.attempts, self.attempts[1:], strict=False)]


@pytest.mark.looptime
async def test_retries_back_off_from_half_a_second_doubling_up_to_a_minute():
    handler = Flaky(failures=9)
    queue: WorkQueue[str] = WorkQueue(handler)
    task = await _running(queue)
    queue.add("a")
    await asyncio.wait_for(handler.succeeded.wait(), 600)
    await _stop(task)
    assert handler.gaps() == [0.5, 1, 2, 4, 8, 16, 32, 60, 60]


@pytest.mark.looptime
async def test_a_success_resets_the_backoff_and_an_add_runs_a_waiting_retry_at_once():
    handler = Flaky(failures=2)
    queue: WorkQueue[str] = WorkQueue(handler)
    task = await _running(queue)
    queue.add("a")  # t=0 fails, retry due at 0.5
    await asyncio.sleep(0.1)
    queue.add("a")  # an event at 0.1: runs now, the retry at 0.5 is dropped; fails, the next waits 1 s
    await asyncio.wait_for(handler.succeeded.wait(), 600)  # at 1.1: succeeds
    assert handler.gaps() == [0.1, 1]
    handler.attempts.clear()
    handler.succeeded.clear()
    handler.failures = 1  # a later failure starts from half a second again
    queue.add("a")
    await asyncio.wait_for(handler.succeeded.wait(), 600)
    await _stop(task)
    assert handler.gaps() == [0.5]
