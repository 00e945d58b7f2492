"""The exception handlers of every FastAPI workload (the agent, the memory service): one error policy.

- A :class:`~kora.core.errors.KoraError` answers its HTTP status with OpenAI's error body
  ``{"error": {"message", "type", "param", "code"}}`` (:func:`error_response`); a 401 adds the RFC 6750
  ``WWW-Authenticate: Bearer error="<code>"`` challenge.
- Under the API prefix (``/v1``) every error has OpenAI's body: a 404 has code ``not_found``, a 405
  ``method_not_allowed``, any other HTTP error ``http_error``. Elsewhere it is ``{"detail": ...}``, except a
  404 for a path that exists under the prefix (an OpenAI client whose ``base_url`` lacks ``/v1``): OpenAI's
  body saying where the API is, code ``missing_v1``.
- A request that fails validation answers 400 (not FastAPI's 422) with the first field's path and reason.
- Any other exception answers 500 naming only a reference under which the whole exception is logged
  (:func:`~kora.core.errors.internal_error`), never a traceback or an internal type name. A workload adds
  handlers for exceptions it can say more about (the memory service's database errors).

FastAPI is imported inside :func:`install_error_handlers` only, so this package stays light for the Starlette
workloads.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from kora.core.errors import KoraError, RequestError, Unauthenticated, internal_error
from kora.core.openai_wire import error_body, invalid_request_message, openai_error_body

if TYPE_CHECKING:
    from fastapi import FastAPI

log = logging.getLogger("kora.serving")

#: An exception handler a workload adds for an exception type of its own.
ErrorHandler = Callable[[Request, Exception], Awaitable[Response]]

#: The code of an HTTP error under the API prefix, by status (others: ``http_error``).
_HTTP_CODES = {404: "not_found", 405: "method_not_allowed"}


def challenge(error: KoraError) -> dict[str, str]:
    """The ``WWW-Authenticate`` header RFC 6750 asks of a 401 for a bearer token; empty for other errors."""
    if isinstance(error, Unauthenticated):
        return {"WWW-Authenticate": f'Bearer error="{error.code}"'}
    return {}


def error_response(error: KoraError, headers: Mapping[str, str] | None = None) -> JSONResponse:
    """``error`` as OpenAI's error body with the error's HTTP status (and ``headers``, if given; a 401 adds its
    ``WWW-Authenticate`` challenge)."""
    return JSONResponse(error_body(error), status_code=error.status, headers=challenge(error) | dict(headers or {}))


def install_error_handlers(
    app: FastAPI, *, api_prefix: str = "/v1", handlers: Mapping[type[Exception], ErrorHandler] | None = None
) -> None:
    """Register the policy's handlers on ``app`` (module docstring), then ``handlers`` (exception type ->
    handler) for the workload's own exceptions."""
    from fastapi.exceptions import RequestValidationError

    def in_api(request: Request) -> bool:
        path = request.url.path
        return path == api_prefix or path.startswith(api_prefix + "/")

    def routed(path: str) -> bool:
        """Whether ``app`` routes ``path`` (read on a 404 only)."""
        return any(getattr(route, "path", None) == path for route in app.routes)

    async def kora_error(_: Request, error: Exception) -> Response:
        assert isinstance(error, KoraError)
        return error_response(error)

    async def http_error(request: Request, error: Exception) -> Response:
        assert isinstance(error, HTTPException)
        if in_api(request):
            code = _HTTP_CODES.get(error.status_code, "http_error")
            body = openai_error_body(str(error.detail), "invalid_request_error", code)
            return JSONResponse(body, status_code=error.status_code, headers=error.headers)
        path = request.url.path
        if error.status_code == 404 and routed(f"{api_prefix}{path}"):
            message = (
                f"No route {request.method} {path}: the OpenAI-compatible API is under {api_prefix} "
                f"({request.method} {api_prefix}{path}); an OpenAI client's base_url must end in {api_prefix}."
            )
            return JSONResponse(openai_error_body(message, "invalid_request_error", "missing_v1"), status_code=404)
        return JSONResponse({"detail": error.detail}, status_code=error.status_code, headers=error.headers)

    async def validation_error(request: Request, error: Exception) -> Response:
        assert isinstance(error, RequestValidationError)
        message = invalid_request_message(error.errors())
        if in_api(request):
            return error_response(RequestError(message))
        return JSONResponse({"detail": message}, status_code=400)

    async def unexpected(request: Request, error: Exception) -> Response:
        failure = internal_error(error)  # logs the exception under the reference the answer names
        log.error("unhandled error on %s: %s", request.url.path, failure.message)
        return error_response(failure)

    app.add_exception_handler(KoraError, kora_error)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(Exception, unexpected)
    for exception_type, handler in (handlers or {}).items():
        app.add_exception_handler(exception_type, handler)
