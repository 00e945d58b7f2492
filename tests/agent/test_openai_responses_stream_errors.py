"""How a streamed Responses turn reports an error, read with the ``openai`` SDK's stream against a real agent:
the turn's own failure (the model failed) is ``response.failed`` and the response reads back as failed; a request
the agent could not serve once the stream had started, before its turn ran (here: the memory store went away, in
strict mode), is the ``error`` event, and its turn never ran."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from kora.scripted import ErrorReply
from tests.support.agent import running_agent
from tests.support.eventually import eventually_async
from tests.support.memory import MemoryProcess, service_env
from tests.support.scripted_server import ScriptedModelServer

pytestmark = pytest.mark.integration


async def test_a_turn_that_fails_is_response_failed_and_reads_back_failed(model: ScriptedModelServer) -> None:
    async with running_agent(model, "helper") as agent:
        client = agent.async_openai()
        model.enqueue(ErrorReply(500, "the model broke"))
        async with client.responses.stream(model="helper", input="fail now") as stream:
            events = [event async for event in stream]
        kinds = [event.type for event in events]
        assert kinds == ["response.created", "response.in_progress", "response.failed"]
        failed = events[-1].response
        assert (failed.status, failed.error.code) == ("failed", "server_error")
        assert "the model broke" in failed.error.message
        stored = await client.responses.retrieve(failed.id)  # the response's own failure is kept with it
        assert (stored.status, stored.error) == ("failed", failed.error)


async def test_a_request_refused_after_the_stream_started_is_the_error_event(
    memory_db: str, model: ScriptedModelServer, tmp_path: Path
) -> None:
    store = MemoryProcess(service_env(memory_db), tmp_path / "memory.log").start()
    try:
        async with running_agent(
            model, "helper", MEMORY_STORE_ENDPOINT=store.url, MEMORY_FAILURE_MODE="strict"
        ) as agent:
            client = agent.async_openai()
            store.kill()
            # Not stored and no session named: nothing reads the store before the stream starts; the turn does.
            async with client.responses.stream(model="helper", input="hello", store=False) as stream:
                events = [event async for event in stream]
            assert [event.type for event in events] == ["response.created", "response.in_progress", "error"]
            error = events[-1]
            assert isinstance(error, openai.types.responses.ResponseErrorEvent)
            assert (error.code, error.sequence_number) == ("memory_unavailable", 2)
            assert "memory store is unavailable" in error.message
            assert model.requests == []  # the turn never ran
            # Stored or not, a refused request leaves nothing behind: no window event, nothing queued for the store
            # (which would bring it back as a failed response once the store answers again).
            async with client.responses.stream(model="helper", input="hello again", store=True) as stream:
                events = [event async for event in stream]
            assert [event.type for event in events] == ["response.created", "response.in_progress", "error"]
            memory = agent.server.app.state.kora.memory
            assert len(memory._outbox) == 0
            assert await memory._fallback.window.count_events() == 0
    finally:
        store.kill()


async def test_a_background_response_refused_by_an_unreachable_store_reads_back_failed(
    memory_db: str, model: ScriptedModelServer, tmp_path: Path
) -> None:
    """A background response was answered (``queued``) before its turn found the store unreachable: unlike a
    request refused at once, its failure is kept, and once the store answers again the response reads back failed."""
    log = tmp_path / "memory.log"
    store = MemoryProcess(service_env(memory_db), log).start()
    try:
        async with running_agent(
            model, "helper", MEMORY_STORE_ENDPOINT=store.url, MEMORY_FAILURE_MODE="strict"
        ) as agent:
            client = agent.async_openai()
            store.kill()
            queued = await client.responses.create(model="helper", input="in the background", background=True)
            assert queued.status == "queued"
            memory = agent.server.app.state.kora.memory
            await eventually_async(lambda: len(memory._outbox) > 0, "the failure queued for the store")
            assert model.requests == []  # the turn never ran
            store = MemoryProcess(service_env(memory_db), log, port=store.port).start()

            async def read_back() -> openai.types.responses.Response | None:
                try:
                    return await client.responses.retrieve(queued.id)
                except (openai.NotFoundError, openai.InternalServerError, openai.APIStatusError):
                    return None  # 503 while the agent finds the store back, 404 until the failure is written

            failed = await eventually_async(read_back, "the background response read back")
            assert failed.status == "failed"
            assert failed.error is not None
            assert failed.error.message.startswith("memory_unavailable: The memory store is unavailable")
    finally:
        store.kill()
