"""The console's own credential (``CONSOLE_ACCESS_TOKEN``): when set, every request but the probes must carry it,
as the password of HTTP Basic authentication (any user name: a browser asks for it once and sends it on) or as a
bearer token, compared in constant time (:func:`kora.core.tokens.token_matches`). Without it the answer is a 401
that asks the browser for Basic credentials, with nothing of the console's data.

The console reads every user's sessions and memory with the operators' tokens, so whoever reaches it reads them
all: this is what keeps it private when it is reachable beyond its operator (the Helm chart routes it on the
Gateway only with this credential set).
"""

from __future__ import annotations

import base64
import binascii

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from kora.core.tokens import token_matches

#: Paths answered without the credential: the kubelet's probes.
OPEN_PATHS = frozenset({"/health", "/ready"})
#: The realm a browser shows when it asks for the credential.
REALM = "Kora console"


def presented_secret(headers: Headers) -> str | None:
    """The secret ``headers`` present: a bearer token, or the password of Basic credentials (``user:password``
    in base64); None without one, with another scheme, a repeated header or undecodable Basic credentials."""
    values = headers.getlist("authorization")
    if len(values) != 1:
        return None
    scheme, _, value = values[0].strip().partition(" ")
    value = value.strip()
    if scheme.lower() == "bearer":
        return value or None
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
        _, colon, password = decoded.partition(":")
        return password if colon else None
    return None


class RequireAccessToken:
    """ASGI middleware: ``app`` behind ``token`` (see the module docstring)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        if token_matches(presented_secret(Headers(scope=scope)), self.token):
            await self.app(scope, receive, send)
            return
        refusal = JSONResponse(
            {"detail": "The console asks for its access token: the password of Basic credentials or a bearer token."},
            status_code=401,
            headers={"WWW-Authenticate": f'Basic realm="{REALM}", charset="UTF-8"'},
        )
        await refusal(scope, receive, send)
