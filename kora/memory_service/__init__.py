"""``kora memory``: the memory service, the MemoryStore workload, on Postgres + pgvector.

Sessions and events (the short-term window), rolling summaries (the medium tier), long-term facts with
embeddings recalled by relevance within a scope, and erasure, behind a versioned HTTP API
(:mod:`kora.memory_service.app`; bodies in :mod:`kora.memory.wire`). Agents reach it through RemoteMemory, over
HTTP only: the agent-side :mod:`kora.memory` never imports this package.

The routes (``app``) parse, authorize and call the operations of :class:`~kora.memory_service.service.MemoryService`,
which run on the process state of :class:`~kora.memory_service.runtime.MemoryRuntime`; the background jobs
(``jobs``) depend on the :class:`~kora.memory_service.jobs.JobHost` protocol, not on the runtime's module.
"""
