"""The agent server's process state: settings, memory, and the runtime loading in the background.

:class:`AgentState` is built once per app by ``kora.agent.app.create_app`` and handed to every router
(``kora.agent.routes``) and to A2A. The runtime (``kora.agent.runtime``, which brings pydantic-ai and, for
agents with tool servers, the MCP client) is imported only by the start-up :meth:`AgentState.begin` runs in the
background, so this module stays light enough for ``/health`` to answer before those libraries load.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from kora.agent.identity import IdentityResolver
from kora.agent.routes.background import BackgroundResponses
from kora.agent.settings import AgentSettings
from kora.agent.unused import unused_packages
from kora.core.errors import Unavailable
from kora.core.imports import import_without
from kora.core.serving import Lifecycle, Readiness, StartupText
from kora.memory import MEMORY_UNAVAILABLE, Memory

if TYPE_CHECKING:
    from kora.agent.runtime import AgentRuntime

log = logging.getLogger("kora.agent")

#: Python's youngest-generation collection threshold once the agent has started (the default is 700): see
#: ``AgentState._start``.
YOUNG_GENERATION_THRESHOLD = 5000
#: The same with tracing on. The batch span processor holds every finished span until it exports them (~12 objects
#: the collector tracks a span; 512 spans a batch by default, and those ended while a batch is encoded): at 5000,
#: collections ran every ~50 traced text turns and walked the spans waiting, ~1.1 ms each, 0.025 ms a turn
#: (GC callbacks, 4000 turns at concurrency 16); at 20000 the spans are exported and freed before one is due
#: (1 collection in 4000 turns).
TRACED_YOUNG_GENERATION_THRESHOLD = 20000

#: How the agent names its start-up in 503 answers and on ``/ready``.
STARTUP_TEXT = StartupText(
    subject="The agent", starting="agent runtime is still loading", failed="agent runtime failed to start"
)


class AgentState:
    """What the routes share: settings, memory, the resolver of users' identities, and the runtime once it has
    loaded.

    ``runtime`` is ``None`` until :meth:`begin` has started it, and stays ``None`` if starting failed
    (``startup_error`` then says why).
    """

    def __init__(self, settings: AgentSettings, memory: Memory) -> None:
        self.settings = settings
        self.memory = memory
        self.identity = IdentityResolver(settings)
        self.runtime: AgentRuntime | None = None
        #: The background responses (``POST /v1/responses`` with ``background: true``) running in this process.
        self.background = BackgroundResponses(memory)
        self._before: Callable[[], Awaitable[None]] | None = None
        #: Called with the runtime once it is built (:meth:`on_runtime`).
        self._attach: Callable[[AgentRuntime], None] | None = None
        #: The runtime as built, before it has started (``runtime`` is set once it has).
        self._built: AgentRuntime | None = None
        self.lifecycle = Lifecycle(self._start, STARTUP_TEXT)

    @property
    def startup_error(self) -> str | None:
        """Why the runtime could not start (``"TypeName: message"``), or None."""
        return self.lifecycle.error

    def begin(self, before: Callable[[], Awaitable[None]] | None = None) -> None:
        """Import and start the runtime in the background of the app's lifespan, after awaiting ``before`` (the
        app's other deferred imports; its failure is a failure to start)."""
        self._before = before
        self.lifecycle.begin()

    async def _start(self) -> None:
        # What the server imported to answer /health lives as long as the process: frozen now, the collections the
        # deferred imports trigger (~1300 modules' objects) no longer walk it (start to /ready: see bench/README.md).
        # The end of start-up collects and freezes again, as before.
        gc.freeze()
        if self._before is not None:
            await self._before()
        module = await asyncio.to_thread(import_without, "kora.agent.runtime", unused_packages(self.settings))
        runtime: AgentRuntime = module.AgentRuntime(self.settings, self.memory)
        self._built = runtime
        if self._attach is not None:
            self._attach(runtime)
        await runtime.start()
        self.runtime = runtime
        # What start-up built (pydantic-ai, schemas, toolsets) lives as long as the process. Frozen, it is no
        # longer walked by every full collection: under load those ran every ~0.5 s for 40-110 ms and freed
        # nothing (bench_agent.py: p99 at concurrency 16 fell from ~65 to ~12 ms, CPU per turn by ~0.08 ms).
        gc.collect()
        gc.freeze()
        # A turn's objects live for the turn (~1 ms of CPU, but 16 turns at once): with Python's default young
        # generation (700 objects) a collection ran every ~5 turns and walked the live turns' objects, promoting
        # them to be walked again; with a larger one most of them are freed by their reference counts before any
        # collection sees them. Measured (GC callbacks, 9000 text turns at concurrency 16): 0.065 ms of collections
        # a turn at 700, 0.017 ms at 5000; RSS after the load the same (113 MB). Traced, the spans waiting to be
        # exported live longer than a turn (TRACED_YOUNG_GENERATION_THRESHOLD).
        young = TRACED_YOUNG_GENERATION_THRESHOLD if runtime.tracing.enabled else YOUNG_GENERATION_THRESHOLD
        gc.set_threshold(young, *gc.get_threshold()[1:])

    def on_runtime(self, attach: Callable[[AgentRuntime], None]) -> None:
        """Call ``attach`` with the runtime: at once if it has been built, else as soon as it is, before it starts
        (the A2A server attaches its approval journal and task resumer; one ``attach``, the last given). A runtime
        that already started gets it after its start: only the shared task store's journal, whose A2A server is
        built before the runtime, must be attached before."""
        if self._built is not None:
            attach(self._built)
        else:
            self._attach = attach

    async def wait_runtime(self) -> AgentRuntime:
        """The runtime, waiting up to :data:`~kora.core.serving.STARTUP_WAIT_SECONDS` for it to load.

        Raises :class:`~kora.core.errors.Unavailable` (503) with code ``starting`` when it is still loading
        after that, ``startup_failed`` when it could not start.
        """
        if self.runtime is not None:  # every request after start-up: no timer, no task
            return self.runtime
        await self.lifecycle.wait()
        assert self.runtime is not None
        return self.runtime

    def tool_definitions(self) -> list[dict[str, Any]]:
        """The runtime's tools (``{name, description, parameters, source}``) without waiting: empty while it loads."""
        return self.runtime.tool_definitions() if self.runtime is not None else []

    def problems(self) -> list[str]:
        """Reasons the agent is not ready (empty when ready)."""
        if self.runtime is None:
            return self.lifecycle.problems()
        return [*self.runtime.problems(), *self.memory.status().problems]

    def readiness(self) -> Readiness:
        """What ``/ready`` answers: starting or failed while the runtime is not running, then not ready while a
        configured tool server cannot be listed or a strict-mode memory store is unreachable; ``details`` say what
        is degraded without making the agent unready, e.g. ``{"memory": "degraded: ..."}``."""
        if self.runtime is None:
            return self.lifecycle.readiness(details=self.details())
        return self.lifecycle.readiness(self.problems(), self.details())

    def check_memory(self) -> None:
        """Raise :class:`~kora.core.errors.Unavailable` (code ``memory_unavailable``) while memory makes the agent
        unready: a strict-mode store known to be unreachable, so a turn would be refused anyway."""
        problems = self.memory.status().problems
        if problems:
            raise Unavailable(f"The memory store is unavailable: {'; '.join(problems)}", code=MEMORY_UNAVAILABLE)

    def details(self) -> dict[str, str]:
        """What ``/ready`` reports without failing: e.g. ``memory: degraded`` while a soft-mode store is away."""
        return self.memory.status().details

    async def forget_session(self, session_id: str) -> None:
        """Before ``session_id`` is erased: cancel its background responses running here, then drop its calls
        waiting for approval without resuming their turn (nothing of it is written afterwards)."""
        await self.background.cancel_session(session_id)
        if self.runtime is not None:
            await self.runtime.forget(self.runtime.approvals.forget_session(session_id), session_id=session_id)

    async def forget_user(self, user_id: str) -> None:
        """Before ``user_id`` is erased: cancel their background responses running here, then drop their calls
        waiting for approval without resuming their turns."""
        await self.background.cancel_user(user_id)
        if self.runtime is not None:
            await self.runtime.forget(self.runtime.approvals.forget_user(user_id), user_id=user_id)

    async def close(self) -> None:
        """Wait for the start-up to end, stop the runtime if it started, then close the memory (server
        shutdown)."""
        await self.lifecycle.close()
        if self.runtime is not None:
            await self.runtime.close()
        await self.memory.close()
