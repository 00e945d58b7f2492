"""Users' identities for tests: RSA keys made with ``cryptography``, JWTs signed with them, and a key set (JWKS)
served over real HTTP on 127.0.0.1, counting how often agents fetch it."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support.threaded import ThreadedServer

ISSUER = "https://idp.test"
AUDIENCE = "kora-agents"


def new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@dataclass
class KeySet:
    """Signing keys by key id; ``published`` are the ids the JWKS endpoint serves; ``fetches`` counts fetches."""

    keys: dict[str, rsa.RSAPrivateKey] = field(default_factory=dict)
    published: list[str] = field(default_factory=list)
    fetches: int = 0
    failing: bool = False

    def add(self, kid: str, *, publish: bool = True) -> rsa.RSAPrivateKey:
        self.keys[kid] = key = new_key()
        if publish:
            self.published.append(kid)
        return key

    def jwks(self) -> dict[str, Any]:
        entries = []
        for kid in self.published:
            entry = RSAAlgorithm.to_jwk(self.keys[kid].public_key(), as_dict=True)
            entries.append(entry | {"kid": kid, "use": "sig", "alg": "RS256"})
        return {"keys": entries}

    def token(
        self,
        sub: str | None = "alice",
        *,
        kid: str = "k1",
        key: rsa.RSAPrivateKey | None = None,
        expires_in: float = 300,
        iss: str = ISSUER,
        aud: str | None = AUDIENCE,
        **claims: Any,
    ) -> str:
        """A token signed by ``key`` (default: the key ``kid``) naming ``kid``; ``None`` leaves a claim out."""
        now = int(time.time())
        payload: dict[str, Any] = {"iss": iss, "iat": now, "exp": now + int(expires_in), "sub": sub, "aud": aud}
        payload |= claims
        payload = {name: value for name, value in payload.items() if value is not None}
        return jwt.encode(payload, key or self.keys[kid], algorithm="RS256", headers={"kid": kid})


def jwks_app(keys: KeySet) -> Starlette:
    async def serve(_: Request) -> Response:
        keys.fetches += 1
        if keys.failing:
            return Response("down", status_code=503)
        return JSONResponse(keys.jwks())

    return Starlette(routes=[Route("/jwks.json", serve)])


@dataclass
class IdentityProvider:
    keys: KeySet
    server: ThreadedServer

    @property
    def jwks_url(self) -> str:
        return f"{self.server.root_url}/jwks.json"

    def agent_env(self, **extra: str) -> dict[str, str]:
        """Agent settings that verify this provider's tokens."""
        return {
            "AUTH_JWT_JWKS_URL": self.jwks_url,
            "AUTH_JWT_ISSUER": ISSUER,
            "AUTH_JWT_AUDIENCE": AUDIENCE,
        } | extra


@asynccontextmanager
async def identity_provider() -> AsyncIterator[IdentityProvider]:
    """A key set with key ``k1``, served at ``/jwks.json`` on a free loopback port."""
    keys = KeySet()
    keys.add("k1")
    async with ThreadedServer(jwks_app(keys), name="jwks", lifespan="off") as server:
        yield IdentityProvider(keys, server)
