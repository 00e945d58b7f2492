"""``kora.agent.active_sessions``: the sessions with a turn running or waiting, read from the runtime's session
locks when metrics are collected (no per-turn update)."""

from __future__ import annotations

import asyncio

import pytest
from opentelemetry.metrics import CallbackOptions

from kora.agent.runtime import SessionLocks
from kora.agent.telemetry.metrics import _active_sessions

pytestmark = pytest.mark.unit


def active() -> int | float:
    (observation,) = _active_sessions(CallbackOptions())
    return observation.value


async def test_a_session_counts_while_a_turn_holds_or_waits_for_it() -> None:
    locks = SessionLocks()
    before = active()
    entered = asyncio.Event()

    async def second_turn() -> None:
        async with locks.hold("a"):
            entered.set()

    async with locks.hold("a"):
        assert active() == before + 1
        waiting = asyncio.create_task(second_turn())
        await asyncio.sleep(0)
        assert active() == before + 1  # the same session, a turn waiting: still one
        async with locks.hold("b"):
            assert active() == before + 2
    await asyncio.wait_for(entered.wait(), 30)
    await waiting
    assert active() == before
    assert len(locks) == 0
