"""Links from a turn's trace id to a trace viewer: ``CONSOLE_TRACE_URL``, a URL template holding ``{trace_id}``
(e.g. ``http://localhost:16686/trace/{trace_id}`` for Jaeger), which the console fills with each trace id it
shows (32 hex digits, W3C trace context)."""

from __future__ import annotations

from urllib.parse import quote, urlsplit

#: The placeholder a template must hold.
PLACEHOLDER = "{trace_id}"


def check_trace_url(template: str) -> str:
    """``template`` when it is an http(s) URL with a host holding :data:`PLACEHOLDER`; raises ValueError saying
    what is wrong otherwise."""
    if PLACEHOLDER not in template:
        raise ValueError(
            f"must hold {PLACEHOLDER} where the trace id goes, e.g. http://localhost:16686/trace/{PLACEHOLDER}"
        )
    parts = urlsplit(fill_trace_url(template, "0" * 32))
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError("must be an http:// or https:// URL with a host")
    return template


def fill_trace_url(template: str, trace_id: str) -> str:
    """``template`` with every :data:`PLACEHOLDER` replaced by ``trace_id`` (percent-encoded)."""
    return template.replace(PLACEHOLDER, quote(trace_id, safe=""))
