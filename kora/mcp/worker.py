"""A tool worker process: loads the tools source once, then runs one tool call at a time.

Run as ``python -m kora.mcp.worker`` by :class:`kora.mcp.pool.WorkerPool`. Tool calls run here rather
than in the server so that a tool that hangs can be *stopped* (the server kills the process when the
call's timeout expires) and a tool that crashes the interpreter (``os._exit``, a segfault, exhausting
memory) takes only its worker down, never the server.

Protocol on the process's original stdin/stdout: frames of a 4-byte big-endian length followed by that
many bytes of UTF-8 JSON. Requests and replies:

- ``{"op": "load", "source": str, "filename": str}`` -> ``{"ok": true, "tools": [name, ...]}`` or
  ``{"ok": false, "error": str}``; always the first request.
- ``{"op": "call", "tool": str, "args": {...}}`` -> ``{"ok": true, "value": <JSON>}`` or
  ``{"ok": false, "error": "<ExceptionType>: <message>", "traceback": str}``.

Error texts and tracebacks are redacted (:mod:`kora.mcp.redact`) with the variables the tools read. Values are
strict JSON (no NaN or infinity: such a result is the tool's error) and every string is valid UTF-8 (a lone
surrogate is sent as its backslash escape as text, see :func:`encodable`).
Anything the tools print goes to stderr (also redacted), never into the protocol stream. Standard
library only, so a worker starts in well under a second.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import struct
import sys
import traceback
from collections.abc import Callable
from typing import IO, Any

from kora.core.errors import ToolSourceError
from kora.mcp.redact import RecordingEnviron, Redactor
from kora.mcp.source import load_tools

_HEADER = struct.Struct(">I")
#: Bytes of the length prefix of each frame.
HEADER_SIZE = _HEADER.size


def encode_frame(message: dict[str, Any]) -> bytes:
    """One protocol frame: length prefix plus compact JSON. Raises ``TypeError``/``ValueError`` if not JSON:
    NaN and infinities included (JSON has none; a ``-> float`` tool returning NaN would otherwise send content
    that breaks its own output schema), ``RecursionError`` for a value nested too deep.

    Strings are made encodable first (:func:`encodable`)."""
    body = json.dumps(encodable(message), separators=(",", ":"), allow_nan=False).encode()
    return _HEADER.pack(len(body)) + body


def encodable(value: Any) -> Any:
    r"""``value`` with every string (dict keys included) encodable as UTF-8: a lone surrogate, as in a file name
    ``os.listdir`` decoded from bytes that are not UTF-8 (``"\udc80"``), becomes its escape as text, the six
    characters ``\udc80``, so the name stays readable and distinct. Other values are returned as they are."""
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode()
        return value
    if isinstance(value, dict):
        return {encodable(key): encodable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [encodable(item) for item in value]
    return value


def frame_length(header: bytes) -> int:
    """The body length announced by a frame's ``HEADER_SIZE``-byte header."""
    length: int = _HEADER.unpack(header)[0]
    return length


class _RedactingStream:
    """A text stream that masks secret values before writing to the real stream."""

    def __init__(self, real: IO[str], redactor: Redactor) -> None:
        self._real = real
        self._redactor = redactor

    def write(self, text: str) -> int:
        self._real.write(self._redactor.redact(text))
        return len(text)

    def flush(self) -> None:
        self._real.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _Worker:
    """The worker's state: protocol streams, the redactor and the loaded tools."""

    def __init__(self, proto_in: IO[bytes], proto_out: IO[bytes], redactor: Redactor) -> None:
        self._in = proto_in
        self._out = proto_out
        self._redactor = redactor
        self._tools: dict[str, Callable[..., Any]] = {}
        self._loop = asyncio.new_event_loop()

    def _read(self) -> dict[str, Any] | None:
        header = self._in.read(HEADER_SIZE)
        if len(header) < HEADER_SIZE:
            return None
        body = self._in.read(frame_length(header))
        message: dict[str, Any] = json.loads(body)
        return message

    def _load(self, request: dict[str, Any]) -> bytes:
        try:
            # The server checked the signatures already; the worker only needs the functions.
            loaded = load_tools(request["source"], request["filename"], check=False)
        except ToolSourceError as exc:
            return encode_frame({"ok": False, "error": self._redactor.redact(str(exc))})
        self._tools = {name: tool.function for name, tool in loaded.tools.items()}
        return encode_frame({"ok": True, "tools": list(self._tools)})

    def _failure(self, exc: BaseException) -> bytes:
        return encode_frame(
            {
                "ok": False,
                "error": self._redactor.redact(_describe(exc)),
                "traceback": self._redactor.redact("".join(traceback.format_exception(exc))),
            }
        )

    def _call(self, request: dict[str, Any]) -> bytes:
        name = request["tool"]
        function = self._tools.get(name)
        if function is None:
            return encode_frame({"ok": False, "error": f"LookupError: no tool named {name!r}", "traceback": ""})
        try:
            value = function(**request["args"])
            if inspect.isawaitable(value):
                value = self._loop.run_until_complete(value)
        except BaseException as exc:  # SystemExit from a tool is the tool's failure too, not the worker's.
            return self._failure(exc)
        try:
            return encode_frame({"ok": True, "value": value})
        except (TypeError, ValueError, RecursionError) as exc:  # a set, bytes, NaN, a cycle: the tool's error
            return self._failure(TypeError(f"the tool returned a value that cannot be sent as JSON: {exc}"))

    def serve(self) -> int:
        """Answer requests until the server closes stdin; returns the exit code."""
        while (request := self._read()) is not None:
            frame = self._load(request) if request.get("op") == "load" else self._call(request)
            self._out.write(frame)
            self._out.flush()
        return 0


def main() -> int:
    """Serve the protocol on stdin/stdout until stdin closes; returns the exit code (0)."""
    # Keep the protocol on private copies of fds 0/1 and point fds 0/1 elsewhere, so tools that read stdin
    # or print (even from C code) cannot corrupt the frames.
    proto_in = os.fdopen(os.dup(0), "rb")
    proto_out = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    redactor = Redactor(os.environ)
    # Swapped for good in this process, not cleared: the stand-in reads and writes the real environment.
    os.environ = RecordingEnviron(os.environ, redactor)  # type: ignore[assignment]  # noqa: B003
    sys.stdin = open(os.devnull)  # noqa: SIM115 - lives as long as the process
    sys.stdout = _RedactingStream(sys.__stderr__ or sys.stderr, redactor)
    sys.stderr = _RedactingStream(sys.__stderr__ or sys.stderr, redactor)
    return _Worker(proto_in, proto_out, redactor).serve()


if __name__ == "__main__":
    sys.exit(main())
