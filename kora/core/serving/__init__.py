"""The chassis every Kora workload stands on (agent, memory service, tool server, model servers, console).

- :mod:`.lifecycle`: the start-up run in the background of the app's lifespan, its state (starting, started,
  failed) and what requests and ``/ready`` make of it.
- :mod:`.probes`: ``GET /health`` and ``GET /ready`` with one body shape.

Starlette only: a workload built on plain Starlette (the model proxy, the console) does not load FastAPI.
"""

from kora.core.serving.lifecycle import STARTUP_WAIT_SECONDS, Lifecycle, Readiness, StartupText, Status
from kora.core.serving.probes import ReadinessCheck, add_probe_routes, is_probe_endpoint, probe_routes

__all__ = [
    "STARTUP_WAIT_SECONDS",
    "Lifecycle",
    "Readiness",
    "ReadinessCheck",
    "StartupText",
    "Status",
    "add_probe_routes",
    "is_probe_endpoint",
    "probe_routes",
]
