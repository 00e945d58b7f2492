"""Inline tools of the quickstart agent (served by `kora mcp`; only the standard library is available)."""

from datetime import UTC, datetime


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first addend.
        b: The second addend.
    """
    return a + b


def utc_time() -> str:
    """The current UTC time in ISO 8601."""
    return datetime.now(UTC).isoformat(timespec="seconds")
