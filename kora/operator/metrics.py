"""The operator's own metrics, recorded where each reconcile's span is made: over OTLP, and as Prometheus text
at ``/metrics`` (docs/telemetry.md).

- ``kora.operator.reconcile.duration`` (histogram, seconds; its count is the number of reconciles), attributes
  ``kora.resource.kind`` (``Agent``, ``ModelAPI``, ``MCPServer``, ``MemoryStore``) and ``kora.outcome`` (``ok``,
  or ``error`` when the reconcile raised and the work queue retries it);
- ``kora.operator.reconcile.writes`` (counter, ``{write}``), attribute ``kora.resource.kind``: API writes
  (applies, deletes, status patches) the successful reconciles made. Zero growth while nothing changes is the
  operator's "no write when nothing changed" promise, seen from outside.

Neither carries the namespace or name of a resource: a series per resource would grow without bound. The
instruments come from the global meter API, so they are no-ops until :func:`kora.core.telemetry.setup_telemetry`
installs the process's meter provider (``kora operator`` does at start), and cost nothing in tests of the
reconciler that set up no telemetry.
"""

from __future__ import annotations

from typing import Literal

from opentelemetry import metrics

__all__ = ["DURATION_BUCKETS", "SCOPE", "Outcome", "record_reconcile"]

#: Instrumentation scope of the operator's metrics.
SCOPE = "kora.operator"
#: Reconcile duration buckets (s): from a reconcile that finds nothing to do (well under a millisecond) to one
#: that waits on a slow API server.
DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

Outcome = Literal["ok", "error"]

_meter = metrics.get_meter(SCOPE)
_duration = _meter.create_histogram(
    "kora.operator.reconcile.duration",
    unit="s",
    description="Duration of each reconcile (its count is the number of reconciles).",
    explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
)
_writes = _meter.create_counter(
    "kora.operator.reconcile.writes",
    unit="{write}",
    description="API writes (applies, deletes, status patches) made by successful reconciles.",
)


def record_reconcile(kind: str, seconds: float, outcome: Outcome, writes: int = 0) -> None:
    """Record one reconcile of a ``kind`` resource that took ``seconds`` and ended with ``outcome``, having made
    ``writes`` API writes (known only when it succeeded)."""
    _duration.record(seconds, {"kora.resource.kind": kind, "kora.outcome": outcome})
    if outcome == "ok":
        # Zero too: the series exists from the first reconcile, so a rate over it reads 0, not "no data".
        _writes.add(writes, {"kora.resource.kind": kind})
