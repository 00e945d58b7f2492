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
    a configured tool server cannot be listed.
    """
    agent_name = state.settings.agent_name

    @router.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok", "agent": agent_name}

    @router.get("/ready")
    async def ready() -> JSONResponse:
        problems = state.problems()
        if problems:
            return JSONResponse({"status": "not_ready", "reasons": problems}, status_code=503)
        return JSONResponse({"status": "ready"})
