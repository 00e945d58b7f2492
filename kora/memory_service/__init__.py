"""``kora memory``: the memory service, the MemoryStore workload, on Postgres + pgvector.

Sessions and events (the short-term window), rolling summaries (the medium tier), long-term facts with
embeddings recalled by relevance within a scope, and erasure, behind a versioned HTTP API
(:mod:`kora.memory_service.app`; bodies in :mod:`kora.memory.wire`). Agents reach it through RemoteMemory.
"""
