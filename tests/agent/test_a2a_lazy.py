""":class:`~kora.agent.a2a.lazy.LazyA2A` closes the server it built even when the server failed to start: the
server may hold the shared task store's pool and engine, which nothing else closes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, cast

import pytest

from kora.agent.a2a.lazy import LazyA2A
from kora.core.errors import Unavailable

pytestmark = pytest.mark.unit

if TYPE_CHECKING:
    from kora.agent.a2a.routes import A2AServer


class FailingToStart:
    """The two methods of :class:`~kora.agent.a2a.routes.A2AServer` that :class:`LazyA2A` calls around a start-up:
    ``start`` fails as the shared task store's would with its database gone, ``close`` is recorded."""

    def __init__(self) -> None:
        self.closed = 0

    async def start(self) -> None:
        raise OSError("connection refused")

    async def close(self) -> None:
        self.closed += 1


@pytest.mark.parametrize("built_before_load", [True, False])
async def test_a_server_that_failed_to_start_is_still_closed(built_before_load: bool) -> None:
    server = FailingToStart()

    def build(_: ModuleType) -> A2AServer:
        return cast("A2AServer", server)

    lazy = LazyA2A(build)
    if built_before_load:
        lazy.load_now()
    with pytest.raises(OSError, match="connection refused"):
        await lazy.load()
    # Requests see it as failed; the shutdown still closes what it holds, once.
    with pytest.raises(Unavailable, match="failed to start"):
        await lazy.wait()
    await lazy.close()
    assert server.closed == 1


class Started:
    """An :class:`~kora.agent.a2a.routes.A2AServer` as far as :class:`LazyA2A` sees one: ``start`` counted."""

    def __init__(self) -> None:
        self.started = 0

    async def start(self) -> None:
        self.started += 1

    async def close(self) -> None:
        pass


def counted_build(server: object) -> tuple[Callable[[ModuleType], A2AServer], list[ModuleType]]:
    """A build of ``server`` for :class:`LazyA2A`, and the modules it was called with, one per build."""
    builds: list[ModuleType] = []

    def build(module: ModuleType) -> A2AServer:
        builds.append(module)
        return cast("A2AServer", server)

    return build, builds


async def test_the_first_request_loads_the_server_once_for_every_request_that_waits() -> None:
    # No start-up load: the requests that come first start it, and share it.
    server = Started()
    build, builds = counted_build(server)
    lazy = LazyA2A(build)
    assert lazy.server is None
    first, second = await asyncio.gather(lazy.wait(), lazy.wait())
    assert first is second is server
    assert [module.__name__ for module in builds] == ["kora.agent.a2a.routes"]
    assert server.started == 1
    assert await lazy.wait() is server
    await lazy.load()  # a start-up load after the first request's waits for that one: nothing built or started again
    assert len(builds) == 1
    assert server.started == 1


async def test_a_load_that_failed_before_the_server_was_built_is_tried_again_by_the_next_request() -> None:
    # The first build fails (as the SDK's import would on a transient error); the request that waits is told so,
    # and the next request loads it again.
    server = Started()
    attempts: list[ModuleType] = []

    def build(module: ModuleType) -> A2AServer:
        attempts.append(module)
        if len(attempts) == 1:
            raise OSError("no space left on device")
        return cast("A2AServer", server)

    lazy = LazyA2A(build)
    with pytest.raises(Unavailable, match="no space left on device"):
        await lazy.wait()
    assert await lazy.wait() is server
    assert len(attempts) == 2
    assert server.started == 1
    assert await lazy.wait() is server  # loaded: not built again
    assert len(attempts) == 2


async def test_a_server_built_that_failed_to_start_is_not_built_again() -> None:
    # Built, then its start failed: what it holds stays for close(), and a request does not build a second one.
    server = FailingToStart()
    build, builds = counted_build(server)
    lazy = LazyA2A(build)
    for _ in range(2):
        with pytest.raises(Unavailable, match="failed to start"):
            await lazy.wait()
    assert len(builds) == 1
    await lazy.close()
    assert server.closed == 1
