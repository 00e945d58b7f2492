"""Kora's scripted model, plus send timestamps of streamed chunks, for bench_agent.py's streaming latency.

Same app as ``kora model`` (uvloop, httptools, no access log) with extra rules: a prompt starting with
``stream-bench`` gets ``STREAM_CHUNKS`` chunks ``c00| ``, ``c01| ``... sent ``STREAM_DELAY`` seconds apart; one
starting with ``tool-bench`` gets a ``save_memory`` call, then ``Saved.`` after the tool ran; one starting with
``mcp-bench`` gets a call of the MCP tool ``add(a=2, b=3)``, then ``Sum: 5``; one starting with ``client-bench`` a
call of the client's tool ``get_weather`` (then the default ``Tool result: ...``; bench_openai.py).
An ASGI wrapper records ``time.monotonic()`` right after each response body piece carrying a ``cNN|`` marker
was handed to the socket. ``GET /_bench/sends`` returns ``{"NN": t}`` for the markers sent since the last
call (and clears them). CLOCK_MONOTONIC is system-wide on Linux, so these times compare directly with the
bench process's own ``time.monotonic()`` at receipt.

Run: ``MODEL_PORT=N python bench/stamping_model.py``.
"""

import json
import os
import re
import signal
import time

import uvicorn

from kora.scripted import ScriptedModel, create_app, load_script

STREAM_CHUNKS = int(os.environ.get("STREAM_CHUNKS", "20"))
STREAM_DELAY = float(os.environ.get("STREAM_DELAY", "0.05"))
MARKER = re.compile(rb"c(\d\d)\|")

chunks = [f"c{i:02d}| " for i in range(STREAM_CHUNKS)]
rules = load_script(
    [
        {"when": {"user_matches": "^tool-bench", "after_tool": True}, "reply": "Saved."},
        {
            "when": {"user_matches": "^tool-bench", "tool_available": "save_memory"},
            "reply": {"kind": "tool_calls", "calls": [{"name": "save_memory", "arguments": {"content": "{user}"}}]},
        },
        {
            "when": {"user_matches": "^client-bench", "tool_available": "get_weather", "after_tool": False},
            "reply": {"kind": "tool_calls", "calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
        },
        {"when": {"user_matches": "^mcp-bench", "after_tool": True}, "reply": "Sum: {tool_result}"},
        {
            "when": {"user_matches": "^mcp-bench", "tool_available": "add"},
            "reply": {"kind": "tool_calls", "calls": [{"name": "add", "arguments": {"a": 2, "b": 3}}]},
        },
        {
            "when": {"user_matches": "^stream-bench"},
            "reply": {"kind": "text", "text": "".join(chunks), "chunks": chunks, "chunk_delay_seconds": STREAM_DELAY},
        },
    ]
)
inner = create_app(ScriptedModel(rules, model_name="scripted", max_recorded=1000))
sends: dict[str, float] = {}


async def app(scope, receive, send):
    if scope["type"] == "http" and scope["path"] == "/_bench/sends":
        body = json.dumps(sends).encode()
        sends.clear()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return

    async def stamped_send(message):
        await send(message)
        if message["type"] == "http.response.body" and b"|" in message.get("body", b""):
            now = time.monotonic()
            for match in MARKER.finditer(message["body"]):
                sends[match.group(1).decode()] = now

    await inner(scope, receive, stamped_send)


if __name__ == "__main__":
    for stop_signal in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop_signal, lambda signum, frame: None)
    port = int(os.environ["MODEL_PORT"])
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, lifespan="off")
    uvicorn.Server(config).run()
