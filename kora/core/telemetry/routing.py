"""A Starlette route that names itself in the request's scope, for the HTTP telemetry (``http.route``).

Starlette's router and FastAPI's ``APIRoute`` leave the matched route in ``scope["route"]``; FastAPI's router does
not for a plain Starlette ``Route`` added to it (``router.add_route``), so such a request's server span stayed
named by its method alone (``POST``) and its ``http.server.request.duration`` had no ``http.route``
(:class:`kora.core.telemetry.http.RequestMetrics` reads the scope).
"""

from __future__ import annotations

from starlette.routing import Match, Route
from starlette.types import Scope

__all__ = ["NamedRoute"]


class NamedRoute(Route):
    """A ``Route`` that puts itself in the child scope whenever it matches (fully, or by path only: a 405)."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        """Starlette's match, with ``"route": self`` in the child scope unless nothing matched."""
        match, child_scope = super().matches(scope)
        if match is not Match.NONE:
            child_scope["route"] = self
        return match, child_scope
