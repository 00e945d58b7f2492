"""The agent server's exception handlers: JSON errors everywhere, OpenAI's error shape under ``/v1``.

Under ``/v1`` every error is ``{"error": {"message", "type", "code"}}`` (``kora.core.openai_wire``);
elsewhere it is ``{"detail": ...}``. Validation errors answer 400 (not FastAPI's 422), and an unexpected
exception answers 500 "Internal error" (logged here), never a traceback or an internal type name.
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


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers for :class:`KoraError`, HTTP errors, validation errors and any other exception."""

    @app.exception_handler(KoraError)
    async def kora_error(_: Request, error: KoraError) -> JSONResponse:
        return error_response(error)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> Response:
        if request.url.path.startswith("/v1"):
            code = "not_found" if error.status_code == 404 else "http_error"
            body = openai_error_body(str(error.detail), "invalid_request_error", code)
            return JSONResponse(body, status_code=error.status_code, headers=error.headers)
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
