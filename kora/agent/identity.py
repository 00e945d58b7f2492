"""Who a request acts for: the verified user id of a turn (docs/identity.md).

Two sources, both off unless configured (the ``AUTH_*`` settings):

* **a bearer JWT** (``Authorization: Bearer <token>``), verified here against the keys published at
  ``AUTH_JWT_JWKS_URL``: an asymmetric signature by a key of that set, ``exp`` (required), ``nbf``/``iat``,
  and ``iss``/``aud`` when ``AUTH_JWT_ISSUER``/``AUTH_JWT_AUDIENCE`` are set. The user id is the claim
  ``AUTH_JWT_USER_CLAIM`` (``sub``);
* **a header set by a trusted gateway** (``AUTH_TRUSTED_USER_HEADER``): its value is the user id.

A request that sends neither is anonymous (:data:`ANONYMOUS`, ``user_id`` None): identity is never mandatory.
A credential that is sent but fails is refused, never treated as anonymous: a bearer token that does not verify
raises :class:`~kora.core.errors.Unauthenticated` (401), a malformed trusted header
:class:`~kora.core.errors.RequestError` (400). When both sources are configured and sent, the token wins. An
``Authorization`` header of another scheme (``Basic ...``) is not a bearer token: it is ignored.

An :class:`Identity` keeps the credential it was verified from, so delegation can hand it to peers, which verify
it themselves; nothing else (the prompt, a tool's arguments, other headers) can set or change it.

PyJWT (with cryptography, ~30-60 ms of imports) loads only when ``AUTH_JWT_JWKS_URL`` is set. Its key client
is synchronous, so key sets are fetched in a worker thread and kept for :data:`KEYS_MAX_AGE_SECONDS`; requests
whose key is known never leave the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from starlette.datastructures import Headers

from kora.agent.settings import AgentSettings
from kora.core.errors import RequestError, Unauthenticated, Unavailable
from kora.core.tokens import AUTHORIZATION, bearer_token, token_matches
from kora.memory import Memory

if TYPE_CHECKING:
    from jwt import PyJWK, PyJWKClient

log = logging.getLogger("kora.agent.identity")

#: Longest user id accepted, in characters.
MAX_USER_ID_LENGTH = 256
#: Signature algorithms a token may use: public-key ones only, so a key set can never be used as an HMAC secret.
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
#: Seconds of clock difference with the token issuer tolerated on ``exp``, ``nbf`` and ``iat``.
LEEWAY_SECONDS = 30
#: Seconds a fetched key set is used before it is fetched again (a failed refetch keeps the old keys).
KEYS_MAX_AGE_SECONDS = 300.0
#: Seconds at least between refetches caused by a token naming a key the set lacks (a rotated key), so tokens
#: with made-up key ids cannot make the agent hammer the key server.
UNKNOWN_KEY_REFETCH_SECONDS = 30.0
#: Seconds to wait for the key server.
KEYS_FETCH_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class Identity:
    """The verified identity of one request: ``user_id`` (None: anonymous) and ``credential``, the headers that
    prove it to a peer (``{"Authorization": "Bearer ..."}`` or ``{<trusted header>: <user id>}``; empty when
    anonymous). ``credential`` is kept out of ``repr`` so it never reaches a log line."""

    user_id: str | None = None
    credential: Mapping[str, str] = field(default_factory=dict, repr=False)


#: A request without a verified identity.
ANONYMOUS = Identity()


def user_id_problem(value: str) -> str | None:
    """Why ``value`` cannot be a user id (None when it can): blank, longer than :data:`MAX_USER_ID_LENGTH`, or
    holding a character that is not printable (control and format characters, line breaks, and spaces other
    than U+0020, which would forge log lines or make two ids look alike)."""
    if not value.strip():
        return "is empty"
    if len(value) > MAX_USER_ID_LENGTH:
        return f"is longer than {MAX_USER_ID_LENGTH} characters"
    if not all(char == " " or char.isprintable() for char in value):
        return "contains control characters"
    return None


def header_user_id_problem(value: str) -> str | None:
    """Why a trusted header's ``value`` cannot be a user id: :func:`user_id_problem`, and header values must be
    visible ASCII and spaces (what every hop forwards unchanged)."""
    if not value.isascii():
        return "contains characters outside visible ASCII"
    return user_id_problem(value)


async def open_session(memory: Memory, session_id: str | None, app_name: str, identity: Identity) -> str:
    """``memory.get_or_create_session`` for a turn of ``identity``: the session is created under its user id (an
    anonymous turn's is anonymous, as before identities existed). Raises :class:`~kora.core.errors.Forbidden`
    (403, code ``session_forbidden``) for a session that belongs to another user
    (:func:`kora.memory.base.check_owner`; docs/identity.md), before the turn reads or writes anything."""
    return await memory.get_or_create_session(session_id, app_name, identity.user_id)


@dataclass(frozen=True)
class MemoryReader:
    """Who asks the memory endpoints (``/memory/*``): the ``operator`` (``AGENT_ADMIN_TOKEN``: every session), or
    the verified ``user_id`` (their own sessions only; None: anonymous, nothing listed)."""

    operator: bool = False
    user_id: str | None = None


class IdentityResolver:
    """Resolves the :class:`Identity` of each request for ``settings`` (see the module docstring)."""

    def __init__(self, settings: AgentSettings) -> None:
        self._admin_token = settings.agent_admin_token
        self._header = settings.auth_trusted_user_header
        self._tokens = (
            TokenVerifier(
                settings.auth_jwt_jwks_url,
                issuer=settings.auth_jwt_issuer,
                audience=settings.auth_jwt_audience,
                user_claim=settings.auth_jwt_user_claim,
            )
            if settings.auth_jwt_jwks_url
            else None
        )

    @property
    def enabled(self) -> bool:
        """True when some source of identity is configured."""
        return self._tokens is not None or bool(self._header)

    async def resolve(self, headers: Headers) -> Identity:
        """The identity ``headers`` prove: :data:`ANONYMOUS` when they carry no configured credential.

        Raises :class:`~kora.core.errors.Unauthenticated` (401) for a bearer token that does not verify,
        :class:`~kora.core.errors.RequestError` (400) for a trusted header that is not a user id (or is sent
        twice), :class:`~kora.core.errors.Unavailable` (503) when the key set cannot be fetched at all.
        """
        if self._tokens is not None:
            token = bearer_token(headers)
            if token is not None:
                return Identity(await self._tokens.user_id(token), {AUTHORIZATION: f"Bearer {token}"})
        if self._header:
            values = headers.getlist(self._header)
            if not values:
                return ANONYMOUS
            if len(values) > 1:
                raise RequestError(f"The {self._header} header was sent more than once.", code="invalid_user")
            value = values[0].strip()
            problem = header_user_id_problem(value)
            if problem:
                raise RequestError(f"The {self._header} header {problem}.", code="invalid_user")
            return Identity(value, {self._header: value})
        return ANONYMOUS

    async def memory_reader(self, headers: Headers) -> MemoryReader:
        """Who asks a memory endpoint: the operator when the bearer token is ``AGENT_ADMIN_TOKEN`` (compared in
        constant time, before any user JWT), else the verified user of :meth:`resolve` (anonymous without one).

        Raises :class:`~kora.core.errors.Unauthenticated` (401) for a bearer token that is neither the operator's
        nor (with ``AUTH_JWT_JWKS_URL``) a user's JWT that verifies; the errors of :meth:`resolve` otherwise.
        """
        token = bearer_token(headers)
        if token is not None and token_matches(token, self._admin_token):
            return MemoryReader(operator=True)
        if token is not None and self._tokens is None:
            raise Unauthenticated("The bearer token is not this agent's operator token (AGENT_ADMIN_TOKEN).")
        return MemoryReader(user_id=(await self.resolve(headers)).user_id)


class TokenVerifier:
    """Verifies bearer JWTs against the key set at ``jwks_url``; ``issuer`` and ``audience`` are checked when
    not empty; the user id is the ``user_claim`` claim."""

    def __init__(self, jwks_url: str, *, issuer: str, audience: str, user_claim: str) -> None:
        import jwt  # here, not at the top: only agents that verify tokens pay for PyJWT and cryptography

        self._jwt = jwt
        # PyJWKClient fetches, parses and filters the set (signing keys with a kid); the caching is done here,
        # on the event loop, so a known key costs no thread hop.
        self._client: PyJWKClient = jwt.PyJWKClient(jwks_url, cache_jwk_set=False, timeout=KEYS_FETCH_TIMEOUT_SECONDS)
        self._issuer = issuer or None
        self._audience = audience or None
        self._user_claim = user_claim
        self._keys: list[PyJWK] = []
        self._expires_at = 0.0  # time.monotonic() after which the keys held are fetched again
        self._attempted_at: float | None = None  # time.monotonic() of the last fetch tried
        self._fetch_error = ""  # why the last fetch failed ("" after a success)
        self._fetching = asyncio.Lock()

    async def user_id(self, token: str) -> str:
        """The user id ``token`` proves; raises :class:`~kora.core.errors.Unauthenticated` when it does not
        verify, :class:`~kora.core.errors.Unavailable` when no key set could be fetched."""
        jwt = self._jwt
        try:
            kid = jwt.get_unverified_header(token).get("kid")
            key = await self._key(kid if isinstance(kid, str) else None)
            claims = jwt.decode(
                token,
                key,
                algorithms=list(ALGORITHMS),
                issuer=self._issuer,
                audience=self._audience,
                leeway=LEEWAY_SECONDS,
                options={"require": ["exp"]},
            )
        except jwt.PyJWTError as error:
            raise Unauthenticated(f"The bearer token is not valid: {error}") from None
        user = claims.get(self._user_claim)
        problem = "is missing" if user is None else "is not a string" if not isinstance(user, str) else None
        problem = problem or user_id_problem(str(user))
        if problem:
            raise Unauthenticated(f"The bearer token's {self._user_claim!r} claim {problem}.")
        return str(user)

    async def _key(self, kid: str | None) -> PyJWK:
        """The key that signed a token naming ``kid``. The set is fetched when none is held or it is older than
        :data:`KEYS_MAX_AGE_SECONDS`, or when it lacks ``kid`` (a rotated key; for that reason at most every
        :data:`UNKNOWN_KEY_REFETCH_SECONDS`). Requests that waited while a fetch ran use its result."""
        if self._fresh():
            key = self._match(kid)
            if key is not None:
                return key
        asked = time.monotonic()
        async with self._fetching:
            tried_meanwhile = self._attempted_at is not None and self._attempted_at >= asked
            unknown = self._match(kid) is None
            may_refetch = self._attempted_at is None or asked - self._attempted_at >= UNKNOWN_KEY_REFETCH_SECONDS
            if not tried_meanwhile and (not self._fresh() or (unknown and may_refetch)):
                await self._fetch()
        key = self._match(kid)
        if key is not None:
            return key
        if not self._keys:
            raise Unavailable(
                f"The keys to verify bearer tokens could not be fetched: {self._fetch_error}", code="keys_unavailable"
            )
        if kid is None:
            raise Unauthenticated("The bearer token names no key id, and the key set has several keys.")
        raise Unauthenticated(f"No key of the key set has the token's key id {kid!r}.")

    def _fresh(self) -> bool:
        return time.monotonic() < self._expires_at

    def _match(self, kid: str | None) -> PyJWK | None:
        if kid is None:
            return self._keys[0] if len(self._keys) == 1 else None
        return next((key for key in self._keys if key.key_id == kid), None)

    async def _fetch(self) -> None:
        """Fetch the key set in a worker thread (PyJWKClient is synchronous). A failure is logged and kept in
        ``_fetch_error``; the keys held, if any, stay in use and the fetch is tried again after
        :data:`UNKNOWN_KEY_REFETCH_SECONDS` (the key server being down must not refuse every user)."""
        try:
            self._keys = await asyncio.to_thread(self._client.get_signing_keys, True)
        except (self._jwt.PyJWTError, ValueError) as error:  # ValueError: an answer that is not JSON
            log.warning("could not fetch the key set from %s: %s", self._client.uri, error)
            self._fetch_error = str(error) or type(error).__name__
            self._expires_at = time.monotonic() + UNKNOWN_KEY_REFETCH_SECONDS if self._keys else 0.0
        else:
            self._fetch_error = ""
            self._expires_at = time.monotonic() + KEYS_MAX_AGE_SECONDS
        # Stamped at the end, so every request that queued while this fetch ran takes its result.
        self._attempted_at = time.monotonic()
