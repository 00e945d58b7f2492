"""Waiting in tests for something another process or task does: the one polling loop every test uses.

A test that waits polls a check until it holds. The bound (``within``, seconds) only keeps a broken test from
hanging: it is generous, never a claim about speed, and on expiry ``AssertionError`` names what was awaited and
the last value (or tolerated exception) seen, which is what a reader of a CI log needs first.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

#: Seconds a wait is bounded by unless the caller says otherwise.
WITHIN_SECONDS = 60.0


def eventually(
    check: Callable[[], T],
    what: str,
    *,
    within: float = WITHIN_SECONDS,
    every: float = 0.05,
    tolerate: tuple[type[BaseException], ...] = (),
    explain: Callable[[], str] | None = None,
) -> T:
    """Call ``check`` every ``every`` seconds until it returns something truthy, and return that.

    An exception of a ``tolerate`` type counts as "not yet". Past ``within`` seconds, ``AssertionError`` names
    ``what`` and the last value or exception, followed by what ``explain`` returns then (a process's log, say).
    """
    deadline = time.monotonic() + within
    last: object = None
    while True:
        try:
            value = check()
        except tolerate as error:
            last = error
        else:
            if value:
                return value
            last = value
        if time.monotonic() >= deadline:
            raise AssertionError(_expired(what, within, last, explain))
        time.sleep(every)


async def eventually_async(
    check: Callable[[], Awaitable[T] | T],
    what: str,
    *,
    within: float = WITHIN_SECONDS,
    every: float = 0.05,
    tolerate: tuple[type[BaseException], ...] = (),
    explain: Callable[[], str] | None = None,
) -> T:
    """:func:`eventually` inside an event loop: ``check`` may be a coroutine function or a plain one, and the
    loop sleeps with :func:`asyncio.sleep` so the awaited work runs meanwhile."""
    deadline = time.monotonic() + within
    last: object = None
    while True:
        try:
            outcome = check()
            value = await outcome if inspect.isawaitable(outcome) else outcome
        except tolerate as error:
            last = error
        else:
            if value:
                return value
            last = value
        if time.monotonic() >= deadline:
            raise AssertionError(_expired(what, within, last, explain))
        await asyncio.sleep(every)


def _expired(what: str, within: float, last: object, explain: Callable[[], str] | None) -> str:
    """The message of a wait that ran out."""
    message = f"{what}: not seen within {within:g} s (last: {last!r})"
    return f"{message}\n{explain()}" if explain is not None else message
