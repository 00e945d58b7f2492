"""kora.operator.queue.WorkQueue: coalescing, one worker per key, re-run after a change mid-reconcile, retry."""

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
