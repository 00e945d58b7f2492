"""The floor of a text turn: a bare FastAPI + uvicorn server that forwards each chat request once to the model.

Its model client is a pool of raw asyncio HTTP/1.1 keep-alive connections (``asyncio.open_connection``, one
request at a time per connection, the answer read by its ``Content-Length``): no client library, so the server's
CPU per request is what FastAPI, uvicorn (uvloop, httptools) and one proxied request cost at least. Every figure
of a text turn is a ratio to this server measured in the same run (``bench_agent.py``, ``profile_turn.py``).
A streamed request (``"stream": true`` in its body, found by a byte search) is relayed chunk by chunk as the
model sends it (the first-content bench, ``bench_agent.py --first-content``).

Run: ``MODEL_API_URL=http://127.0.0.1:PORT/v1 PROXY_PORT=N python bench/floor_proxy.py``.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse

_url = urlsplit(os.environ["MODEL_API_URL"].rstrip("/"))
MODEL_HOST, MODEL_PORT = _url.hostname or "127.0.0.1", _url.port or 80
CHAT_HEAD = (
    f"POST {_url.path}/chat/completions HTTP/1.1\r\nHost: {_url.netloc}\r\nContent-Type: application/json\r\n"
    "Content-Length: "
).encode()


#: Seconds an idle connection is kept: less than uvicorn's keep-alive (5 s), after which the model closes it.
KEEPALIVE_SECONDS = 4.0


class Pool:
    """Idle keep-alive connections to the model; a request takes one (or opens one) and gives it back."""

    def __init__(self) -> None:
        self.idle: list[tuple[float, asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def _send(self, body: bytes) -> tuple[bytes, asyncio.StreamReader, asyncio.StreamWriter]:
        """POST ``body`` on an idle connection (or a new one); the answer's head and the connection."""
        now = time.monotonic()
        while self.idle:
            since, reader, writer = self.idle.pop()
            if now - since < KEEPALIVE_SECONDS:
                break
            writer.close()
        else:
            reader, writer = await asyncio.open_connection(MODEL_HOST, MODEL_PORT)
        writer.write(b"%s%d\r\n\r\n%s" % (CHAT_HEAD, len(body), body))
        return await reader.readuntil(b"\r\n\r\n"), reader, writer

    async def post(self, body: bytes) -> tuple[int, bytes]:
        """POST ``body`` to the model's chat completions; (status, answer body)."""
        head, reader, writer = await self._send(body)
        length = None
        for line in head.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        if length is not None:
            payload = await reader.readexactly(length)
        else:  # chunked (the bench's stamping model wraps every answer)
            payload = b"".join([piece async for piece in self._chunks(reader)])
        self.idle.append((time.monotonic(), reader, writer))
        return int(head[9:12]), payload

    async def stream(self, body: bytes) -> tuple[int, AsyncIterator[bytes]]:
        """POST ``body`` (a streamed request); (status, the answer's chunks as they arrive). The model answers
        streams chunked; the connection is given back after the last chunk."""
        head, reader, writer = await self._send(body)

        async def relay() -> AsyncIterator[bytes]:
            async for piece in self._chunks(reader):
                yield piece
            self.idle.append((time.monotonic(), reader, writer))

        return int(head[9:12]), relay()

    @staticmethod
    async def _chunks(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
        while size := int((await reader.readuntil(b"\r\n"))[:-2], 16):
            yield await reader.readexactly(size)
            await reader.readexactly(2)
        await reader.readexactly(2)


pool = Pool()
app = FastAPI()


@app.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}


@app.post("/v1/chat/completions")
async def chat(request: Request) -> Response:
    body = await request.body()
    if b'"stream": true' in body or b'"stream":true' in body:
        status, pieces = await pool.stream(body)
        return StreamingResponse(pieces, status_code=status, media_type="text/event-stream")
    status, payload = await pool.post(body)
    return Response(payload, status_code=status, media_type="application/json")


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(os.environ["PROXY_PORT"]), log_level="warning", access_log=False)
