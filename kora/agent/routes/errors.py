"""The agent server's exception handlers: JSON errors everywhere, OpenAI's error shape under ``/v1``.

Under ``/v1`` every error is ``{"error": {"message", "type", "code"}}`` (``kora.core.openai_wire``);
elsewhere it is ``{"detail": ...}``. A path that exists under ``/v1`` but was asked without it (an OpenAI client
whose ``base_url`` lacks ``/v1``) gets a 404 in OpenAI's shape saying so, code ``missing_v1``. Validation
errors answer 400 (not FastAPI's 422), and an unexpected exception answers 500 "Internal error" (logged here),
never a traceback or an internal type name.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from kora.agent.identity import challenge
from kora.core.errors import KoraError, RequestError
from kora.core.openai_wire import error_body, invalid_request_message, openai_error_body

log = logging.getLogger("kora.agent")


def error_response(error: KoraError, headers: dict[str, str] | None = None) -> JSONResponse:
    """``error`` as OpenAI's error body with the error's HTTP status (and ``headers``, if given; a 401 adds its
    ``WWW-Authenticate`` challenge)."""
    return JSONResponse(error_body(error), status_code=error.status, headers=challenge(error) | (headers or {}))


def _route_paths(app: FastAPI) -> set[str]:
    """The paths ``app`` routes (read on a 404 only)."""
    return {path for route in app.routes if isinstance(path := getattr(route, "path", None), str)}


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers for :class:`KoraError`, HTTP errors, validation errors and any other exception."""

    @app.exception_handler(KoraError)
    async def kora_error(_: Request, error: KoraError) -> JSONResponse:
        return error_response(error)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> Response:
        path = request.url.path
        if path.startswith("/v1"):
            code = {404: "not_found", 405: "method_not_allowed"}.get(error.status_code, "http_error")
            body = openai_error_body(str(error.detail), "invalid_request_error", code)
            return JSONResponse(body, status_code=error.status_code, headers=error.headers)
        if error.status_code == 404 and f"/v1{path}" in _route_paths(app):
            message = (
                f"No route {request.method} {path}: the OpenAI-compatible API is under /v1 ({request.method} "
                f"/v1{path}); an OpenAI client's base_url must end in /v1."
            )
            return JSONResponse(openai_error_body(message, "invalid_request_error", "missing_v1"), status_code=404)
        return JSONResponse({"detail": error.detail}, status_code=error.status_code, headers=error.headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, error: RequestValidationError) -> JSONResponse:
        message = invalid_request_message(error.errors())
        if request.url.path.startswith("/v1"):
            return error_response(RequestError(message))
        return JSONResponse({"detail": message}, status_code=400)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, error: Exception) -> JSONResponse:
        log.exception("unhandled error on %s", request.url.path)
        return error_response(KoraError("Internal error"))
