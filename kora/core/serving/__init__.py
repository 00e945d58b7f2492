"""The chassis every Kora workload stands on (agent, memory service, tool server, model servers, console).

- :mod:`.building`: the app a server runs while the workload's app is still being built (``/health`` at once).
- :mod:`.lifecycle`: the start-up run in the background of the app's lifespan, its state (starting, started,
  failed) and what requests and ``/ready`` make of it.
- :mod:`.probes`: ``GET /health`` and ``GET /ready`` with one body shape.
- :mod:`.errors`: the one error-handler policy (error bodies in each surface's shape).
- :mod:`.settings`: the one settings loader and the shared request-limit field.

Other packages import from this package's face, never from its modules.

Starlette only: a workload built on plain Starlette (the model proxy, the console) does not load FastAPI.
"""

from kora.core.serving.building import BuildingApp
from kora.core.serving.errors import challenge, error_response, install_error_handlers
from kora.core.serving.lifecycle import STARTUP_WAIT_SECONDS, Lifecycle, Readiness, StartupText, Status
from kora.core.serving.probes import add_probe_routes, is_probe_endpoint, probe_routes
from kora.core.serving.settings import load_settings, request_limit_field
from kora.core.serving.streaming import StreamingAnswer

__all__ = [
    "STARTUP_WAIT_SECONDS",
    "BuildingApp",
    "Lifecycle",
    "Readiness",
    "StartupText",
    "Status",
    "StreamingAnswer",
    "add_probe_routes",
    "challenge",
    "error_response",
    "install_error_handlers",
    "is_probe_endpoint",
    "load_settings",
    "probe_routes",
    "request_limit_field",
]
