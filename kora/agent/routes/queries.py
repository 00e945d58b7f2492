"""Query parameters of the ``/v1`` routes that list or show stored objects (responses, conversations, items):
unknown ones refused, OpenAI's cursor paging (``after``, ``limit``, ``order``) checked and applied."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from fastapi import Request
from pydantic import JsonValue

from kora.agent.responses_api import item_page
from kora.core.errors import RequestError

#: The query parameters of a paged listing.
PAGE_PARAMS: Final = frozenset({"after", "limit", "order"})
#: ``include``, as given plainly or as the ``openai`` SDK sends a list (``include[]=...``).
INCLUDE_PARAMS: Final = frozenset({"include", "include[]"})


def refuse_query(request: Request, served: frozenset[str] = frozenset()) -> None:
    """Refuse the first query parameter not ``served`` (400 ``unsupported_parameter`` naming it)."""
    for name in request.query_params:
        if name in served:
            continue
        raise RequestError(
            f"Unsupported parameter: '{name}' is not supported by this agent.", code="unsupported_parameter", param=name
        )


def refuse_include(request: Request) -> None:
    """Refuse a non-empty ``include`` (400 ``unsupported_value``): nothing is added to a stored object."""
    if any(value for name in INCLUDE_PARAMS for value in request.query_params.getlist(name)):
        raise RequestError(
            "Unsupported value: 'include' must be empty: this agent adds no extra output data.",
            code="unsupported_value",
            param="include",
        )


def page(request: Request, items: Sequence[dict[str, JsonValue]]) -> dict[str, JsonValue]:
    """One page of ``items`` (oldest first) in OpenAI's list shape, as the query asks: ``limit`` 1-100 (default
    20), ``order`` ``asc`` or ``desc`` (default), ``after`` an item id. Raises :class:`RequestError` (400
    ``invalid_value``) for a bad ``limit`` or ``order``."""
    query = request.query_params
    limit = query.get("limit", "20")
    if not (limit.isascii() and limit.isdigit() and 1 <= int(limit) <= 100):
        raise RequestError(
            "Invalid value: 'limit' must be an integer from 1 to 100.", code="invalid_value", param="limit"
        )
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise RequestError("Invalid value: 'order' must be 'asc' or 'desc'.", code="invalid_value", param="order")
    return item_page(items, query.get("after"), int(limit), order)
