"""Shared bearer tokens between Kora's own workloads: the memory service's admin and agent credentials, an agent's
operator credential (docs/identity.md, "Who can read and erase what").

A token is an opaque random string (:func:`new_token`: 32 bytes of ``secrets``, URL-safe base64, 43 characters),
sent as ``Authorization: Bearer <token>`` and compared in constant time (:func:`token_matches`), so the time a
refusal takes says nothing about how much of a guess was right. An empty configured token matches nothing: the
routes it guards are closed (private by default).
"""

from __future__ import annotations

import hmac
import secrets

from starlette.datastructures import Headers

from kora.core.errors import Unauthenticated

BEARER = "bearer"
AUTHORIZATION = "Authorization"
#: Bytes of randomness in a generated token.
TOKEN_BYTES = 32


def new_token() -> str:
    """A fresh token: :data:`TOKEN_BYTES` random bytes as URL-safe base64 (no padding)."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def token_matches(presented: str | None, expected: str) -> bool:
    """Whether ``presented`` (None: no bearer token sent) equals ``expected``, compared in constant time.

    False whenever ``expected`` is empty: an unset token admits no one.
    """
    if not expected or presented is None:
        return False
    return hmac.compare_digest(presented.encode(), expected.encode())


def bearer_header(token: str) -> dict[str, str]:
    """``{"Authorization": "Bearer <token>"}``; empty when ``token`` is empty (nothing to send)."""
    return {"Authorization": f"Bearer {token}"} if token else {}


def bearer_token(headers: Headers) -> str | None:
    """The bearer token of ``headers``; None without an ``Authorization`` header or with another scheme.

    Raises :class:`~kora.core.errors.Unauthenticated` for an empty token or a repeated ``Authorization`` header.
    """
    values = headers.getlist(AUTHORIZATION)
    if not values:
        return None
    if len(values) > 1:
        raise Unauthenticated("The Authorization header was sent more than once.")
    scheme, _, token = values[0].strip().partition(" ")
    if scheme.lower() != BEARER:
        return None
    token = token.strip()
    if not token:
        raise Unauthenticated("The bearer token is empty.")
    return token
