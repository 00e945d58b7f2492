"""A streamed HTTP answer that stops when its client leaves, with one asyncio task watching for that.

Starlette's :class:`~starlette.responses.StreamingResponse` watches for the client leaving (``http.disconnect``)
on servers that speak ASGI before 2.4, as uvicorn does (2.3: a send after the client left is dropped, not an
error), by running the body and a listener in an anyio task group: measured alone, ~95 us of CPU per streamed
response against ~6 us without the listener, all of it before the first piece of the body is produced.
:class:`StreamingAnswer` does the same with one asyncio task: the listener cancels the task that streams when the
client leaves, and that cancellation ends the response quietly, as the task group's does. On ASGI 2.4 and later,
Starlette's own path (no listener) is used.
"""

from __future__ import annotations

import asyncio

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send


class StreamingAnswer(StreamingResponse):
    """:class:`~starlette.responses.StreamingResponse` whose body stops (cancelled at the await it waits on) when
    the client leaves, watched by one asyncio task (module docstring). A cancellation
    from elsewhere (a server shutting down) is raised as before; an exception of the listener's ``receive`` is
    raised once the body ended."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        version = tuple(int(part) for part in scope.get("asgi", {}).get("spec_version", "2.0").split("."))
        streaming = asyncio.current_task()
        if scope["type"] != "http" or version >= (2, 4) or streaming is None:
            await super().__call__(scope, receive, send)
            return
        left = False

        async def listen() -> None:
            nonlocal left
            await self.listen_for_disconnect(receive)
            left = True
            streaming.cancel()

        listener = asyncio.create_task(listen(), name="kora-client-left")
        taken_back = False
        try:
            await self.stream_response(send)
        except asyncio.CancelledError:
            # The listener's own cancellation ends the answer, as a task group's cancel scope does: taken back, and
            # any other one (a shutdown's, a timeout's) is raised with its count intact.
            if left:
                streaming.uncancel()
                taken_back = True
            if not left or streaming.cancelling():
                raise
        finally:
            listener.cancel()
        if left and not taken_back:  # the listener's cancellation, swallowed by the body: taken back
            streaming.uncancel()
        if listener.done() and not listener.cancelled() and (failure := listener.exception()) is not None:
            raise failure
        if self.background is not None:
            await self.background()
