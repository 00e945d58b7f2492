"""Whether each Proxy ModelAPI's backend answers, shown in ``kora up``'s table and ``kora status``.

A Proxy ModelAPI is Ready as soon as its proxy listens (its readiness never calls the backend, as in a
cluster, where a slow or rate-limited provider must not take the proxy out of service). Locally that hides
the commonest first-run mistake, a backend URL nothing answers on. :class:`BackendWatch` asks each backend
``GET <apiBase>/models`` every :data:`CHECK_INTERVAL` seconds: any HTTP answer (even 401 or 404) means
reachable; a connection error or timeout sets the workload's NOTE to
``proxy -> <apiBase> (unreachable: <reason>)`` and tells the user once per change. Nothing is stopped or
restarted: requests through the proxy answer 502 until the backend answers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import httpx

from kora.local.state import WorkloadState
from kora.resources import ModelAPI, ModelAPIMode, ResourceGraph, ResourceRef, ref_of

__all__ = ["CHECK_INTERVAL", "BackendWatch", "proxy_backends", "unreachable_note"]

#: Seconds between two checks of one backend; each waits at most :data:`CHECK_TIMEOUT` seconds.
CHECK_INTERVAL = 10.0
CHECK_TIMEOUT = 3.0


def unreachable_note(note: str, reason: str | None) -> str:
    """``note`` (``proxy -> <apiBase>``) with `` (unreachable: reason)`` when ``reason`` is set."""
    base = note.split(" (unreachable:", 1)[0]
    return f"{base} (unreachable: {reason})" if reason else base


def proxy_backends(graph: ResourceGraph) -> dict[ResourceRef, str]:
    """``{ref: apiBase}`` of every Proxy ModelAPI in ``graph``."""
    backends: dict[ResourceRef, str] = {}
    for resource in graph:
        if isinstance(resource, ModelAPI) and resource.spec.mode is ModelAPIMode.PROXY:
            assert resource.spec.proxy_config is not None  # guaranteed by ModelAPISpec's mode check
            backends[ref_of(resource)] = str(resource.spec.proxy_config.api_base)
    return backends


class BackendWatch:
    """Check the backends of ``backends`` (``{workload: apiBase}``) until :meth:`run` is cancelled.

    ``on_change(workload, reason)`` is called (in the event loop) after a workload's NOTE changed; ``reason``
    is None once the backend answers again.
    """

    def __init__(
        self,
        backends: Mapping[ResourceRef, str],
        workloads: Mapping[ResourceRef, WorkloadState],
        on_change: Callable[[WorkloadState, str | None], None],
    ) -> None:
        self._backends = dict(backends)
        self._workloads = workloads
        self._on_change = on_change

    async def check(self, client: httpx.AsyncClient, key: ResourceRef) -> None:
        """One check of ``key``'s backend; updates its NOTE and calls ``on_change`` when it changed."""
        reason: str | None = None
        try:
            await client.get(self._backends[key].rstrip("/") + "/models")
        except httpx.TimeoutException:
            reason = f"no answer within {CHECK_TIMEOUT:g} s"
        except httpx.HTTPError as error:
            reason = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        workload = self._workloads[key]
        note = unreachable_note(workload.note, reason)
        if note != workload.note:
            workload.note = note
            self._on_change(workload, reason)

    async def run(self) -> None:
        """Check every backend at once, then every :data:`CHECK_INTERVAL` seconds, until cancelled."""
        if not self._backends:
            return
        async with httpx.AsyncClient(timeout=CHECK_TIMEOUT) as client:
            while True:
                await asyncio.gather(*(self.check(client, key) for key in self._backends))
                await asyncio.sleep(CHECK_INTERVAL)
