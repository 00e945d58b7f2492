"""The OpenAI error body, the one error shape every Kora HTTP surface that speaks or fronts the OpenAI API
uses (the agent's ``/v1``, the scripted model, the model proxy and the local gateway)."""

from __future__ import annotations

from pydantic import JsonValue

from kora.core.errors import KoraError


def openai_error_body(message: str, type_: str, code: str | None = None, **extra: JsonValue) -> dict[str, JsonValue]:
    """``{"error": {"message", "type", "param": null, "code", **extra}}``: what OpenAI clients parse."""
    error: dict[str, JsonValue] = {"message": message, "type": type_, "param": None, "code": code}
    error.update(extra)
    return {"error": error}


def error_body(error: KoraError) -> dict[str, JsonValue]:
    """``error`` (see :mod:`kora.core.errors`) as OpenAI's error body, for ``/v1``."""
    return openai_error_body(error.message, error.openai_type, error.code)
