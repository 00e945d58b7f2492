"""A FastAPI route for an endpoint that reads the request itself: ``async def endpoint(request: Request) ->
Response``, no parameters, dependencies or response model.

FastAPI's own handler runs the same steps for every route whatever its endpoint declares: it looks for a body to
parse, solves the (here empty) dependencies, which builds a sub-response for headers and background tasks the
endpoint cannot use, opens its telemetry context and checks what the endpoint returned. For an endpoint that takes
the request and returns a response none of that does anything, and on a text turn it cost ~0.07 ms of the agent's
~1.2 ms (``bench/profile_turn.py``). :class:`RequestRoute` uses FastAPI's documented extension point for this
(a custom ``APIRoute`` whose ``get_route_handler`` gives the handler, "Custom Request and APIRoute class"): the
handler is the endpoint itself. Everything else is FastAPI's: matching, ``scope["route"]``, the exception
handlers, the OpenAPI operation (its id, path and method unchanged).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from inspect import signature
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute, APIRouter

__all__ = ["RequestRoute", "request_route"]

#: An endpoint a :class:`RequestRoute` serves.
Endpoint = Callable[[Request], Coroutine[Any, Any, Response]]


class RequestRoute(APIRoute):
    """An ``APIRoute`` served by its endpoint alone, called with the request. ``TypeError`` at construction when
    the endpoint declares anything besides the ``Request`` (a parameter, a dependency, a body or a response
    model), which this route would not resolve. Add it to the app's own router (as :func:`request_route` does):
    dependencies given to ``include_router`` are not seen here, and would not run."""

    def get_route_handler(self) -> Endpoint:
        """The endpoint itself (see the module docstring)."""
        dependant = self.dependant
        declared = (
            dependant.path_params
            or dependant.query_params
            or dependant.header_params
            or dependant.cookie_params
            or dependant.body_params
            or dependant.dependencies
            or self.dependencies
            or self.response_model is not None
        )
        takes_request_alone = dependant.request_param_name is not None and len(signature(self.endpoint).parameters) == 1
        if declared or not takes_request_alone:
            raise TypeError(f"{self.path}: a RequestRoute's endpoint takes the Request alone and returns a Response")
        endpoint: Endpoint = self.endpoint
        return endpoint


def request_route(router: APIRouter, path: str, *, methods: list[str]) -> Callable[[Endpoint], Endpoint]:
    """A decorator adding its endpoint to ``router`` at ``path`` for ``methods`` as a :class:`RequestRoute` (what
    ``@router.post(path)`` does for an ``APIRoute``: same name, operation id and place in the route table)."""

    def add(endpoint: Endpoint) -> Endpoint:
        router.add_api_route(path, endpoint, methods=methods, route_class_override=RequestRoute)
        return endpoint

    return add
