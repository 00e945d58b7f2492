"""The ``calc`` MCP server's one tool the approval tests gate, ``add``, and the ledger of the calls it ran: a test
that approves a call checks it ran exactly once, with the arguments approved (or edited)."""

from __future__ import annotations

#: The arguments of every call :func:`add` ran, in order; a test module clears it before each test.
RAN: list[dict[str, int]] = []


def add(a: int, b: int) -> int:
    """Add two integers."""
    RAN.append({"a": a, "b": b})
    return a + b
