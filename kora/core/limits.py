"""Request limits on every workload's HTTP surface (``docs/configuration.md`` "Request limits"):
a client's mistake is a 4xx with a JSON body, never a 500.

:class:`RequestLimits` is one ASGI middleware that each app factory puts in front of its app (``kora agent``,
``kora mcp``, ``kora memory``, ``kora model-proxy``, ``kora model``, ``kora model-hosted``). For every HTTP
request with a body it:

1. refuses a body larger than ``max_body_bytes`` with **413** before reading it: at once when the declared
   ``Content-Length`` is over the limit, else as soon as the bytes that arrived pass it (``Content-Length`` can
   lie or be absent with chunked transfer);
2. refuses, with **400**, a body (unless its ``Content-Type`` is an upload's: multipart, audio, image, video or
   octet-stream) whose JSON nests deeper than :data:`MAX_JSON_DEPTH` arrays/objects, holds a
   number with more than :data:`MAX_NUMBER_DIGITS` digits or one that is not finite (``1e400``), or the
   non-JSON words ``NaN``/``Infinity`` that Python's parser would accept (:func:`json_problem`). Python's
   parser would answer these with ``RecursionError``/``ValueError`` deep inside an app, or produce numbers no
   JSON encoder can write back;
3. hands the app the body it read, and the real channel afterwards (so a streaming response still sees the
   client disconnect).

The refusal's body is the app's own error shape, chosen by the ``refuse`` callback: :func:`openai_refusal`
(``{"error": {"message", "type", "code"}}``, the default) or :func:`jsonrpc_refusal` (a JSON-RPC 2.0 error
object). A body the checks pass is not parsed here: each app parses it as before, knowing it is bounded.
"""

from __future__ import annotations

import itertools
import logging
import re
from collections.abc import Callable

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kora.core.errors import InvalidJSON, KoraError, PayloadTooLarge, jsonrpc_error
from kora.core.openai_wire import error_body

log = logging.getLogger("kora.limits")

#: Deepest nesting of arrays and objects a JSON body may have.
MAX_JSON_DEPTH = 100
#: Most digits (integer and fraction part together) of one JSON number.
MAX_NUMBER_DIGITS = 100

#: ``(path, error)`` -> ``(HTTP status, JSON body)`` of a refusal.
Refusal = Callable[[str, KoraError], tuple[int, object]]

# A JSON string token (escapes included); what is inside strings never counts as structure or numbers.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = bytes(byte for byte in range(256) if byte not in b"[]{}")
# Opening brackets +1, closing -1, read as signed bytes.
_SIGNS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_LONG_NUMBER = re.compile(rb"\d{%d,}" % (MAX_NUMBER_DIGITS + 1))
_SPLIT_NUMBER = re.compile(rb"\d+\.\d+")
_EXPONENT_NUMBER = re.compile(rb"-?\d+(?:\.\d*)?[eE]\+?\d{3,}")  # only these can overflow
_NOT_JSON_WORD = re.compile(rb"NaN|Infinity")


def json_problem(body: bytes) -> str | None:
    """Why ``body`` breaks the JSON limits (a sentence for the client), or ``None``. Linear in the body's size
    and recursion-free; a body that is not JSON at all passes unless it trips a limit (the app's own parser
    then refuses it)."""
    structure = _STRING.sub(b'""', body)
    signed = structure.translate(None, _NOT_BRACKETS).translate(_SIGNS)
    if signed and max(itertools.accumulate(memoryview(signed).cast("b"))) > MAX_JSON_DEPTH:
        return f"JSON nests deeper than {MAX_JSON_DEPTH} levels."
    if _LONG_NUMBER.search(structure) or any(
        len(match) - 1 > MAX_NUMBER_DIGITS for match in _SPLIT_NUMBER.findall(structure)
    ):
        return f"A JSON number has more than {MAX_NUMBER_DIGITS} digits."
    for match in _EXPONENT_NUMBER.findall(structure):
        if float(match) in (float("inf"), float("-inf")):
            return "A JSON number is too large to be represented."
    if _NOT_JSON_WORD.search(structure):
        return "NaN and Infinity are not JSON."
    return None


def openai_refusal(path: str, error: KoraError) -> tuple[int, object]:
    """OpenAI's error body with the error's status (every workload's ``/v1`` shape)."""
    return error.status, error_body(error)


def jsonrpc_refusal(path: str, error: KoraError) -> tuple[int, object]:
    """A JSON-RPC 2.0 error response (``id`` null: the request was not read) with the error's status."""
    return error.status, {"jsonrpc": "2.0", "id": None, "error": jsonrpc_error(error)}


class RequestLimits:
    """ASGI middleware enforcing the body size and JSON limits on ``app`` (see the module docstring).

    ``max_body_bytes``: the largest body accepted (>= 1). ``refuse``: the refusal's status and body.
    ``check_json``: False skips step 2 (only the size is limited), for a proxy whose upstreams check JSON
    themselves, each answering in its own error shape.
    """

    def __init__(
        self, app: ASGIApp, *, max_body_bytes: int, refuse: Refusal = openai_refusal, check_json: bool = True
    ) -> None:
        if max_body_bytes < 1:
            raise ValueError("max_body_bytes must be at least 1")
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.refuse = refuse
        self.check_json = check_json

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check the request (HTTP only), then run the app with the body read here."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_body_bytes:
            await self._refuse(scope, receive, send, self._too_large())
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away before its body arrived: nothing to answer
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                await self._refuse(scope, receive, send, self._too_large())
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        problem = json_problem(body) if body and self.check_json and _may_be_json(scope) else None
        if problem is not None:
            await self._refuse(scope, receive, send, InvalidJSON(f"Invalid JSON: {problem}"))
            return
        await self.app(scope, replay_body(body, receive), send)

    def _too_large(self) -> PayloadTooLarge:
        return PayloadTooLarge(f"Request body is larger than the limit of {self.max_body_bytes} bytes.")

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, error: KoraError) -> None:
        status, body = self.refuse(scope.get("path", ""), error)
        log.info("refused %s %s: %s", scope.get("method"), scope.get("path"), error.message)
        await JSONResponse(body, status_code=status)(scope, receive, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


#: Media types whose bodies are never JSON (uploads): only their size is limited.
_BINARY_TYPES = (b"multipart/", b"audio/", b"image/", b"video/", b"application/octet-stream")


def _may_be_json(scope: Scope) -> bool:
    """False when the request's ``Content-Type`` says its body is binary (an upload), else True (a JSON client
    may send no type, or ``text/plain`` or a form type as ``curl -d`` does)."""
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            return not value.lower().lstrip().startswith(_BINARY_TYPES)
    return True


def replay_body(body: bytes, receive: Receive) -> Receive:
    """A receive channel giving ``body`` as the whole request body first, then the real one (so the app still
    sees the client disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
