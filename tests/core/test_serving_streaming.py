""":class:`~kora.core.serving.StreamingAnswer` on an ASGI 2.3 server (as uvicorn speaks): the whole body when the
client stays; when it leaves mid-answer, the body is cancelled where it waits and closed, the response ends
quietly and the task is left with no cancellation pending; a cancellation from elsewhere is raised."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from kora.core.serving import StreamingAnswer

pytestmark = pytest.mark.unit

SCOPE = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "method": "GET", "path": "/"}


class Client:
    """The server side of one request: ``receive`` gives ``http.disconnect`` once :meth:`leave` was called (or the
    answer is complete, as uvicorn does); ``sent`` holds the body pieces."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.complete = False
        self._gone = asyncio.Event()

    def leave(self) -> None:
        self._gone.set()

    async def receive(self) -> dict[str, object]:
        await self._gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, object]) -> None:
        if message["type"] == "http.response.body":
            self.sent.append(bytes(message.get("body", b"")))  # type: ignore[arg-type]
            if not message.get("more_body", False):
                self.complete = True
                self._gone.set()


async def test_a_client_that_stays_gets_the_whole_body() -> None:
    client = Client()

    async def body() -> AsyncIterator[bytes]:
        for piece in (b"a", b"b", b"c"):
            await asyncio.sleep(0)
            yield piece

    await StreamingAnswer(body())(SCOPE, client.receive, client.send)
    assert client.sent == [b"a", b"b", b"c", b""]
    assert client.complete
    current = asyncio.current_task()
    assert current is not None
    assert current.cancelling() == 0


async def test_a_client_that_leaves_cancels_the_body_where_it_waits() -> None:
    client = Client()
    waiting = asyncio.Event()
    ended: list[str] = []

    async def body() -> AsyncIterator[bytes]:
        try:
            yield b"first"
            waiting.set()
            await asyncio.Event().wait()  # a model that never answers
            yield b"never"
        except asyncio.CancelledError:
            ended.append("cancelled")
            raise
        finally:
            ended.append("closed")

    async def leave_when_waiting() -> None:
        await waiting.wait()
        client.leave()

    leaving = asyncio.create_task(leave_when_waiting())
    answer = asyncio.create_task(StreamingAnswer(body())(SCOPE, client.receive, client.send))
    await asyncio.wait_for(asyncio.shield(answer), 30)
    await leaving
    assert client.sent == [b"first"]
    assert ended == ["cancelled", "closed"]
    assert not answer.cancelled()
    assert answer.cancelling() == 0


async def test_a_cancellation_from_elsewhere_is_raised() -> None:
    client = Client()
    started = asyncio.Event()

    async def body() -> AsyncIterator[bytes]:
        started.set()
        await asyncio.Event().wait()
        yield b"never"

    answer = asyncio.create_task(StreamingAnswer(body())(SCOPE, client.receive, client.send))
    await started.wait()
    answer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await answer
