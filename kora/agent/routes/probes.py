"""``GET /health`` and ``GET /ready``: the probes a supervisor (kubelet, ``kora up``) polls."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from kora.agent.state import AgentState


def add_probe_routes(router: APIRouter, state: AgentState) -> None:
    """Add the probe routes to ``router``.

    ``/health`` answers 200 ``{"status": "ok", "agent": name}`` as soon as the server runs (it never waits
    for the runtime). ``/ready`` answers 200 ``{"status": "ready"}``, or 503
    ``{"status": "not_ready", "reasons": [...]}`` while the runtime loads, after it failed to start, or while
    a configured tool server cannot be listed, or while a strict-mode memory store is unreachable. ``details``
    (when present) says what is degraded without making the agent unready, e.g. ``{"memory": "degraded: ..."}``.
    """
    agent_name = state.settings.agent_name

    @router.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok", "agent": agent_name}

    @router.get("/ready")
    async def ready() -> JSONResponse:
        problems, details = state.problems(), state.details()
        body: dict[str, object] = {"status": "not_ready", "reasons": problems} if problems else {"status": "ready"}
        if details:
            body["details"] = details
        return JSONResponse(body, status_code=503 if problems else 200)
