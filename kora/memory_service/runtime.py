"""The memory service's process state: its database, its model clients and its background workers.

:class:`MemoryRuntime` starts in the background of the app's lifespan (``/health`` answers at once; ``/ready``
says what is still missing); the operations (:class:`kora.memory_service.service.MemoryService`) reach the
database and the models through it, and the background jobs (:mod:`kora.memory_service.jobs`) run on it as their
:class:`~kora.memory_service.jobs.JobHost`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from kora.core.errors import InvalidAnswer, ModelRefused, ModelUnreachable
from kora.core.serving import Lifecycle, Readiness, StartupText
from kora.memory.wire import Mark
from kora.memory_service import facts, jobs
from kora.memory_service.database import Database
from kora.memory_service.erasures import load_mark
from kora.memory_service.models import MemoryModelClient
from kora.memory_service.schema import ensure_embedding_model
from kora.memory_service.settings import MemoryServiceSettings

log = logging.getLogger("kora.memory")

#: How the memory service names its start-up in 503 answers and on ``/ready``.
STARTUP_TEXT = StartupText(
    subject="The memory service",
    starting="the memory service is starting (opening its database)",
    failed="the memory service failed to start",
)


class MemoryRuntime:
    """Create, ``lifecycle.begin()`` (the start-up, in the background), serve, ``await close()``."""

    def __init__(self, settings: MemoryServiceSettings) -> None:
        self.settings = settings
        self.db = Database(settings)
        self.summary = (
            MemoryModelClient(settings.summary_model_api_url, settings.summary_model, settings.model_api_key)
            if settings.has_summary_model
            else None
        )
        self.embedder = (
            MemoryModelClient(settings.embedding_model_api_url, settings.embedding_model, settings.model_api_key)
            if settings.has_embedding_model
            else None
        )
        self.lifecycle = Lifecycle(self._start, STARTUP_TEXT)
        self.embedding_problem: str | None = None
        self._dimension: int | None = None
        self._wake = asyncio.Event()
        self._workers: list[asyncio.Task[None]] = []
        #: The store's erasure mark (:mod:`kora.memory_service.erasures`), once the database is open.
        self.mark: Mark | None = None

    async def _start(self) -> None:
        """Open (and migrate) the database, learn the embedding dimension, start the workers (run by
        :attr:`lifecycle` in the background: a failure is reported by ``/ready`` and every request)."""
        await self.db.open()
        assert self.db.pool is not None
        async with self.db.pool.connection() as conn:
            self.mark = await load_mark(conn)
        await self._learn_dimension()
        self._workers = [
            asyncio.create_task(jobs.worker(self, self._wake), name=f"memory-worker-{n}")
            for n in range(self.settings.workers)
        ]

    def advance_mark(self, seq: int) -> None:
        """An erasure ``seq`` committed: the mark every response carries from now on names it."""
        if self.mark is not None and seq > self.mark.seq:
            self.mark = Mark(self.mark.store_id, seq)

    async def _learn_dimension(self) -> None:
        """Ask the embedding model for one vector to size the vector column (clearing the embeddings of another
        model) and queue the embedding of the facts that have none; on failure, try again on next use."""
        if self.embedder is None or self._dimension is not None:
            return
        try:
            probe = await self.embedder.embed(["dimension probe"])
        except (ModelUnreachable, InvalidAnswer) as error:
            self.embedding_problem = f"embedding model unusable, recall uses full text only: {error}"
            log.warning("%s", self.embedding_problem)
            return
        assert self.db.pool is not None
        async with self.db.pool.connection() as conn:
            await ensure_embedding_model(conn, self.embedder.model, len(probe[0]))
            await jobs.queue_embedding(conn)
        self._dimension = len(probe[0])
        self.embedding_problem = None
        self.wake_workers()

    async def ready(self) -> Database:
        """The open database, waiting up to :data:`~kora.core.serving.STARTUP_WAIT_SECONDS` at start-up.

        Raises :class:`~kora.core.errors.Unavailable` while starting or when start-up failed.
        """
        if not self.lifecycle.started:
            await self.lifecycle.wait()
        return self.db

    async def embed_texts(self, texts: Sequence[str]) -> list[list[float] | None]:
        """An embedding per text, or Nones when there is no usable embedding model (facts are then stored for
        full-text recall, and recall still finds them)."""
        if self.embedder is None or not texts:
            return [None] * len(texts)
        await self._learn_dimension()
        if self._dimension is None:
            return [None] * len(texts)
        try:
            vectors = await self.embedder.embed(texts)
        except ModelRefused as error:  # these texts, not the model: the embed jobs give it them cut to fit
            log.warning("embedding model refused a text; its fact waits for an embed job: %s", error)
            return [None] * len(texts)
        except (ModelUnreachable, InvalidAnswer) as error:
            self.embedding_problem = f"embedding model unusable, recall uses full text only: {error}"
            log.warning("%s", self.embedding_problem)
            return [None] * len(texts)
        if any(len(vector) != self._dimension for vector in vectors):
            self.embedding_problem = "the embedding model changed its dimension; restart the memory service"
            return [None] * len(texts)
        self.embedding_problem = None
        return list(vectors)

    async def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        """An embedding per text, for a background job: raises
        :class:`~kora.memory_service.models.ModelUnreachable` while the model cannot be reached (or its dimension
        is not known yet) and :class:`~kora.memory_service.models.InvalidAnswer` when its answer is unusable,
        including vectors of another dimension than the store's."""
        if self.embedder is None:
            raise ModelUnreachable("no embedding model is configured")
        await self._learn_dimension()
        if self._dimension is None:
            raise ModelUnreachable(self.embedding_problem or "the embedding model's dimension is not known yet")
        vectors = await self.embedder.embed(texts)
        if any(len(vector) != self._dimension for vector in vectors):
            raise InvalidAnswer("the embedding model changed its dimension; restart the memory service")
        return vectors

    async def embed_one(self, text: str) -> list[float] | None:
        """:meth:`embed_texts` for one text."""
        return (await self.embed_texts([text]))[0]

    def wake_workers(self) -> None:
        """Tell idle workers that jobs were queued (by this process)."""
        self._wake.set()

    async def readiness(self) -> Readiness:
        """What ``/ready`` answers: starting or failed until the database is open, then not ready while it is
        unusable. ``details`` say what does not stop it: no embedding model, and how many facts still wait for an
        embedding (``facts_without_embedding``, an int; absent when none do: the embedding model changed and the
        ``embed`` jobs are not done, or it could not be reached)."""
        details: dict[str, str | int] = {}
        if self.embedder is None:
            details["embedding"] = "no embedding model configured: recall uses full-text search"
        elif self.embedding_problem:
            details["embedding"] = self.embedding_problem
        if self.summary is None:
            details["summary"] = "no summary model configured: no fact extraction and no rolling summaries"
        if not self.lifecycle.started:
            return self.lifecycle.readiness(details=details)
        reason = await self.db.ping()
        if reason is None and self.embedder is not None and (waiting := await self._unembedded()):
            details["facts_without_embedding"] = waiting
        return self.lifecycle.readiness([reason] if reason else [], details)

    async def _unembedded(self) -> int:
        """Valid facts without an embedding (0 when the database does not say: readiness is the ping's to judge)."""
        assert self.db.pool is not None
        try:
            async with asyncio.timeout(2.0), self.db.pool.connection(timeout=2.0) as conn:
                return await facts.unembedded_count(conn)
        except Exception as error:  # a database that went away between the ping and this count
            log.warning("cannot count the facts without an embedding: %s", error)
            return 0

    async def close(self) -> None:
        """Wait for the start-up to end, then stop the workers (a running job is rolled back and runs again
        later), close clients and the database."""
        await self.lifecycle.close()
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        for client in (self.summary, self.embedder):
            if client is not None:
                await client.aclose()
        await self.db.close()
