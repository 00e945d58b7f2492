"""The agent server's HTTP application (its endpoints: docs/openai.md, docs/a2a.md, docs/memory.md).

``create_app(settings)`` builds the process state (:class:`~kora.agent.state.AgentState`) and a FastAPI app
with the routes of each group of endpoints (``kora.agent.routes``): ``POST /v1/chat/completions``,
``POST /ag-ui`` (AG-UI, ``kora.agent.ag_ui``), ``GET /tools``, ``GET /memory/events`` and ``/memory/sessions``,
``GET /approvals`` and ``POST /approvals/{id}`` (tool calls waiting for a person's decision, ``kora.agent.approvals``),
``GET /health`` and ``/ready``, and A2A (the card at ``GET /.well-known/agent.json``, JSON-RPC 2.0 on ``POST /``
and the HTTP+JSON binding's ``/message:send``, ``/tasks``, ..., see ``kora.agent.a2a``). The runtime
(``kora.agent.runtime``, which brings pydantic-ai: ~0.5 s of imports) starts in the background after
start-up, so ``/health`` answers within a second; ``/ready`` says not-ready, with reasons, until the runtime
has started and every configured tool server can be listed. Requests that need the runtime wait for it.

Errors on ``/v1`` use OpenAI's body ``{"error": {"message", "type", "code"}}``: 400 for a bad request,
502 when the model API fails, 504 when it times out, 503 while the agent is still starting; never a bare 500
with a traceback (:mod:`kora.core.serving.errors`). Every request passes :class:`kora.core.limits.RequestLimits`
first (``AGENT_MAX_REQUEST_BYTES``, JSON depth and number limits): refused in OpenAI's shape, or as a JSON-RPC
error on ``POST /`` (:func:`kora.agent.a2a.routes.a2a_refusal`). The a2a-sdk is imported by the first A2A request
(:mod:`kora.agent.a2a.lazy`), or before ``/ready`` with the shared task store (``TASK_STORE_TYPE=postgres``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import ModuleType
from typing import TYPE_CHECKING

from fastapi import FastAPI

from kora.agent.a2a.lazy import LazyA2A, a2a_refusal
from kora.agent.routes.ag_ui import add_ag_ui_routes
from kora.agent.routes.approvals import add_approval_routes
from kora.agent.routes.chat import add_chat_routes, add_model_routes
from kora.agent.routes.conversations import add_conversation_routes
from kora.agent.routes.memory import add_memory_routes
from kora.agent.routes.probes import add_probe_routes
from kora.agent.routes.responses import add_responses_routes
from kora.agent.routes.tools import add_tool_routes
from kora.agent.settings import AgentSettings
from kora.agent.state import AgentState
from kora.agent.unused import unused_packages
from kora.core.imports import modules_absent
from kora.core.limits import RequestLimits
from kora.core.serving import install_error_handlers
from kora.memory import Memory, build_memory

if TYPE_CHECKING:
    from kora.agent.a2a.routes import A2AServer


def create_app(settings: AgentSettings, memory: Memory | None = None) -> FastAPI:
    """Build the agent server for ``settings``; ``memory`` defaults to the one the settings select.

    The app's ``state.kora`` is its :class:`AgentState` and ``state.a2a`` its :class:`A2AServer` once loaded (by the
    first A2A request, or before the runtime with the shared task store: :class:`~kora.agent.a2a.lazy.LazyA2A`). Raises
    ``ValueError`` when the memory settings cannot be served (e.g. ``MEMORY_STORE_ENDPOINT`` without the
    remote client).
    """
    state = AgentState(settings, memory or build_memory(settings))

    def build_a2a(routes: ModuleType) -> A2AServer:
        server: A2AServer = routes.A2AServer(
            settings,
            state.wait_runtime,
            state.tool_definitions,
            state.identity,
            check_session=state.memory.check_access,
            check_memory=state.check_memory,
        )
        state.on_runtime(server.attach)
        # The HTTP+JSON binding's routes are the SDK's, so they join the route table once it has loaded, after every
        # other route: matching a chat request never tries a dozen REST patterns.
        server.add_rest_routes(app.router)
        app.state.a2a = server  # last: whoever sees it sees the whole route table
        return server

    a2a = LazyA2A(build_a2a, unused_packages(settings))

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await state.memory.start()
        # The runtime is imported after /health answers, and /ready waits for it. The a2a-sdk (~5 MB, ~0.3-0.6 s)
        # is imported by the first A2A request, unless its server has work of its own from the start: the shared
        # task store's (paused turns of A2A tasks in the approval journal, which the runtime loads as it starts).
        state.begin(before=a2a.load if settings.task_store_type == "postgres" else None)
        try:
            yield
        finally:
            await state.background.close()  # their cancellations are stored before the memory closes
            await a2a.close()
            await state.close()

    app = FastAPI(title=f"Kora agent {settings.agent_name}", lifespan=lifespan)
    app.state.kora = state
    install_error_handlers(app)
    app.add_middleware(RequestLimits, max_body_bytes=settings.agent_max_request_bytes, refuse=a2a_refusal)
    # Added to the app's own router, not included: see kora.agent.routes on why the route table stays flat. The
    # router tries routes in order and no two paths overlap, so the turns' routes come first (a chat turn matched
    # 17 routes before; /metrics stays in front, see kora.core.telemetry.http), the models' after them.
    turns = (add_chat_routes, add_responses_routes, add_ag_ui_routes)
    with modules_absent(unused_packages(settings)):
        for add_routes in (
            *turns,
            add_model_routes,
            add_conversation_routes,
            add_probe_routes,
            add_tool_routes,
            add_memory_routes,
            add_approval_routes,
        ):
            add_routes(app.router, state)
        a2a.add_routes(app.router)
    if settings.task_store_type == "postgres":
        # The shared task store's database is checked before the agent serves anything: a start-up error naming
        # TASK_STORE_URL, rather than an agent that never gets ready.
        a2a.load_now()
    return app
