"""Optional packages the agent's libraries import whenever they are installed and the agent never uses: the agent
builds its routes and imports its deferred parts (the a2a-sdk, the runtime, the delegation client) without them
(:func:`~kora.core.imports.modules_absent`). Its own module, so that each of those importers can name them.
"""

from __future__ import annotations

from kora.agent.settings import AgentSettings

#: Optional packages the agent's libraries import whenever they are installed and the agent never uses: gRPC (the
#: a2a-sdk's gRPC server handler and client transport; the agent speaks JSON-RPC and HTTP+JSON, and an OTLP gRPC
#: exporter has imported it before), ``rich`` and ``pygments`` (httpx's command-line client), ``h2`` (HTTP/2 in
#: httpcore2, which pydantic-ai imports; the agent's clients speak HTTP/1.1) and ``pydantic.v1`` (FastAPI imports it
#: to ask whether a route's types are v1 models; none is). ~20 MB of RSS.
UNUSED_PACKAGES = ("grpc", "rich", "pygments", "h2", "pydantic.v1")


def unused_packages(settings: AgentSettings) -> tuple[str, ...]:
    """The packages the agent's routes are built and its deferred imports (the a2a-sdk, the runtime) made without
    (:func:`~kora.core.imports.modules_absent`): :data:`UNUSED_PACKAGES`, and SQLAlchemy (the SDK's database task
    store, ~16 MB) unless ``TASK_STORE_TYPE=postgres``."""
    return UNUSED_PACKAGES if settings.task_store_type == "postgres" else (*UNUSED_PACKAGES, "sqlalchemy")
