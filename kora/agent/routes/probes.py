"""``GET /health`` and ``GET /ready`` of the agent: the chassis's probes (:mod:`kora.core.serving.probes`).

``/health`` answers 200 ``{"status": "ok", "agent": name}`` as soon as the server runs (it never waits for the
runtime). ``/ready`` answers :meth:`~kora.agent.state.AgentState.readiness`: 503 ``starting`` while the runtime
loads, ``failed`` after it failed to start, ``not_ready`` while a configured tool server cannot be listed or a
strict-mode memory store is unreachable; else 200 ``ready``.
"""

from __future__ import annotations

from fastapi import APIRouter

from kora.agent.state import AgentState
from kora.core.serving import add_probe_routes as add_chassis_probes


def add_probe_routes(router: APIRouter, state: AgentState) -> None:
    """Add the probe routes to ``router``."""
    add_chassis_probes(router, state.readiness, {"agent": state.settings.agent_name})
