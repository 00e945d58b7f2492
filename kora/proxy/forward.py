"""Stream one HTTP request to an upstream and its response back, chunk by chunk.

Why written here rather than using Envoy: the local runtime and the model proxy need prefix stripping,
a per-route timeout, streaming and JSON errors, which is ~100 lines on httpx + Starlette, with no extra
binary to ship and the same code in both places (see ``docs/local.md``).

Timeouts: ``timeout_seconds`` bound the wait for the upstream's response headers and every gap between
two body chunks (so a slow first token is a 504, and a stream that stalls that long is cut). Connecting
gets at most ``min(timeout, 5)`` seconds.

The request goes on as it came: the same path as the client spelled it (percent-escapes kept, see
:func:`raw_path`), the same query string (none when the client sent none: no trailing ``?``), and its body with
the client's ``Content-Length`` when it sent one (chunked only when the client's body was chunked: servers built
on Python's ``http.server`` reject chunked request bodies). The answer carries one ``date`` and one ``server``
header, the proxy's own, as the upstream's are dropped.

Errors (JSON bodies ``{"error": {"message", "type", "code"}}``, the OpenAI shape, which every Kora
workload's clients already parse): 502 ``bad_gateway`` when the upstream cannot be reached or breaks the
connection before the headers, 504 ``gateway_timeout`` when it does not answer within ``timeout_seconds``,
400 ``invalid_path`` for a path with a ``.``/``..`` segment (never sent on); :data:`HTTP_ERROR_HANDLERS` gives an
app's own 404/405 the same shape.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from urllib.parse import unquote

import httpx
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from kora.core.openai_wire import openai_error_body

__all__ = [
    "HOP_BY_HOP",
    "HTTP_ERROR_HANDLERS",
    "error_response",
    "forward",
    "has_dot_segment",
    "raw_path",
    "request_headers",
]

#: Headers that describe one connection, not the message (RFC 9110 section 7.6.1); never forwarded.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)


#: Response headers the proxy's own HTTP server sets once for every answer; the upstream's would be a second copy.
SERVER_SET = frozenset({"date", "server"})


def raw_path(request: Request) -> str:
    """The request's path as the client sent it (percent-escapes such as ``%2F`` kept), without the query."""
    raw = request.scope.get("raw_path")
    return raw.decode("latin-1") if isinstance(raw, bytes) and raw else request.url.path


def error_response(status: int, code: str, message: str) -> JSONResponse:
    """An OpenAI-shaped JSON error: ``{"error": {"message": message, "type": code, "code": code}}``."""
    return JSONResponse(openai_error_body(message, code, code), status_code=status)


def has_dot_segment(path: str) -> bool:
    """Whether ``path`` (as the client sent it) has a ``.`` or ``..`` segment, percent-escaped ones
    (``%2e%2E``, ``..%2f``) included. httpx resolves such segments when it builds the upstream URL, and many
    servers after unescaping, so ``/v1/../admin`` would leave the prefix the request was routed by (for the model
    proxy: reach any path of the backend's host with the backend's key)."""
    return any(segment in (".", "..") for segment in unquote(path, errors="replace").split("/"))


async def _http_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)  # the one class it is registered for (HTTP_ERROR_HANDLERS)
    code = {404: "not_found", 405: "method_not_allowed"}.get(error.status_code, "http_error")
    body = openai_error_body(error.detail, "invalid_request_error", code)
    return JSONResponse(body, status_code=error.status_code, headers=error.headers)


#: Starlette ``exception_handlers`` answering its own errors (404 for an unrouted path, 405 for a method a route
#: does not take) in OpenAI's error shape rather than as plain text; the 405 keeps its ``Allow`` header.
HTTP_ERROR_HANDLERS = {HTTPException: _http_error}


def request_headers(request: Request, *, drop: frozenset[str] = frozenset()) -> list[tuple[bytes, bytes]]:
    """The request's end-to-end headers for the upstream, as the raw bytes the client sent: hop-by-hop, ``host``
    and every lower-case name in ``drop`` removed; each value without the whitespace around it (not part of a field
    value, RFC 9110 5.5; the server may pass a trailing tab on, and the upstream client refuses to send it);
    ``X-Forwarded-*`` added. The client's ``content-length`` is
    kept (the body is relayed as it streams in, and httpx sends a streamed body chunked unless its length is
    given). Bytes, not text: a value with bytes above 0x7F (legal in HTTP/1.1, e.g. Latin-1) would make httpx
    raise while encoding text as ASCII."""
    skip = {name.encode("latin-1") for name in HOP_BY_HOP | {"host"} | drop}
    headers = [(name, value.strip(b" \t")) for name, value in request.headers.raw if name.lower() not in skip]
    client = request.client.host if request.client is not None else ""
    headers += [
        (b"x-forwarded-for", client.encode("latin-1")),
        (b"x-forwarded-host", request.headers.get("host", "").encode("latin-1")),
        (b"x-forwarded-proto", request.url.scheme.encode("latin-1")),
    ]
    return headers


async def _body(request: Request) -> AsyncIterator[bytes]:
    async for chunk in request.stream():
        if chunk:
            yield chunk


async def forward(
    client: httpx.AsyncClient,
    request: Request,
    upstream_url: str,
    *,
    timeout_seconds: float,
    extra_headers: Mapping[str, str] | None = None,
    drop_headers: frozenset[str] = frozenset(),
) -> Response:
    """Send ``request`` (method, body streamed, query string kept) to ``upstream_url`` and stream the answer.

    ``upstream_url`` is the full URL without the query string, its path built from :func:`raw_path`.
    ``extra_headers`` replace request headers of
    the same name (e.g. ``authorization`` for the model proxy). Returns the upstream's status, headers (minus
    hop-by-hop) and body as a :class:`StreamingResponse`, or a 502/504 :func:`error_response`, or 400
    ``invalid_path`` without asking the upstream when the path has a dot segment (:func:`has_dot_segment`). The upstream
    response is closed when the client has read it or gone away.
    """
    if has_dot_segment(raw_path(request)):
        message = "the path may not contain '.' or '..' segments"
        body = openai_error_body(message, "invalid_request_error", "invalid_path")
        return JSONResponse(body, status_code=400)
    headers = request_headers(request, drop=drop_headers | {name.lower() for name in (extra_headers or {})})
    headers += [(name.encode("latin-1"), value.encode("latin-1")) for name, value in (extra_headers or {}).items()]
    query = request.scope.get("query_string", b"")
    # httpx writes a trailing "?" for an empty query it is given: give none.
    url = httpx.URL(upstream_url, query=query) if query else httpx.URL(upstream_url)
    # A body exactly when the client sent one (a length, or a chunked body); none is never turned into chunks.
    has_body = "content-length" in request.headers or "transfer-encoding" in request.headers
    upstream_request = client.build_request(
        request.method,
        url,
        headers=headers,
        content=_body(request) if has_body else None,
        timeout=httpx.Timeout(timeout_seconds, connect=min(timeout_seconds, 5.0)),
    )
    try:
        upstream = await client.send(upstream_request, stream=True)
    except httpx.TimeoutException:
        return error_response(504, "gateway_timeout", f"upstream did not answer within {timeout_seconds:g} s")
    except httpx.HTTPError as error:
        return error_response(502, "bad_gateway", f"upstream unreachable: {type(error).__name__}: {error}")
    response_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP | SERVER_SET}
    return StreamingResponse(
        _relay(upstream),
        status_code=upstream.status_code,
        headers=response_headers,
        background=BackgroundTask(upstream.aclose),
    )


async def _relay(upstream: httpx.Response) -> AsyncIterator[bytes]:
    # Raw bytes: the body goes through as the upstream encoded it (content-encoding header kept), and each
    # chunk is passed on as soon as it arrives, which is what makes SSE token streaming work.
    try:
        async for chunk in upstream.aiter_raw():
            yield chunk
    except httpx.HTTPError:
        # Headers are already sent, so no error status is possible any more: end the body early. The
        # client sees a truncated stream (no final SSE "[DONE]"), which is what a cut connection means.
        return
    finally:
        await upstream.aclose()
