"""Who may call the memory service (docs/identity.md, "Who can read and erase what").

Two credentials, each a bearer token (:mod:`kora.core.tokens`) the operator or ``kora up`` generates:

* **admin** (``MEMORY_SERVICE_ADMIN_TOKEN``): everything, including what spans users and agents: facts at ``store``
  scope, the list of every session or event without an ``app_name``, a fact's history, background jobs.
* **agent** (``MEMORY_SERVICE_AGENT_TOKEN``, sent by bound agents as ``MEMORY_STORE_TOKEN``): one agent's sessions
  (routes naming an ``app_name``), their context, events, recall and fact writes within the identity the agent
  forwards, erasures the agent forwards (``POST /v1/forget``: an agent erases on its operator's or the user's own
  request, docs/identity.md) and the erasure log (``GET /v1/erasures``). The admin token may do all of this too.

Missing or wrong credential: 401 ``invalid_token`` with ``WWW-Authenticate: Bearer``; the agent credential on an
admin route: 403 ``admin_only``; both in the service's error shape. A token left unset admits no one, so a
service started without tokens answers only its probes (``/health``, ``/ready``).
"""

from __future__ import annotations

from enum import IntEnum

from fastapi import Request

from kora.core.errors import Forbidden, Unauthenticated
from kora.core.tokens import bearer_token, token_matches
from kora.memory_service.settings import MemoryServiceSettings


class Role(IntEnum):
    """What a verified caller may do; a higher role may do everything a lower one may."""

    AGENT = 1
    ADMIN = 2


def caller_role(request: Request, settings: MemoryServiceSettings) -> Role:
    """The role of ``request``'s bearer token. Raises :class:`~kora.core.errors.Unauthenticated` (401) without one
    or for a token that is neither credential (an unset credential matches nothing)."""
    token = bearer_token(request.headers)
    if token is None:
        raise Unauthenticated("This memory service needs a bearer token (Authorization: Bearer <token>).")
    if token_matches(token, settings.admin_token):
        return Role.ADMIN
    if token_matches(token, settings.agent_token):
        return Role.AGENT
    raise Unauthenticated("The bearer token is not a credential of this memory service.")


def require(request: Request, settings: MemoryServiceSettings, needed: Role) -> Role:
    """Check that ``request`` may act as ``needed``; its role. Raises :class:`Unauthenticated` (401) as
    :func:`caller_role`, :class:`~kora.core.errors.Forbidden` (403, ``admin_only``) for the agent credential on
    what needs the admin one."""
    role = caller_role(request, settings)
    if role < needed:
        raise Forbidden(
            "This request spans users or agents and needs the memory service's admin credential; "
            "the agent credential reaches one agent's sessions only.",
            code="admin_only",
        )
    return role
