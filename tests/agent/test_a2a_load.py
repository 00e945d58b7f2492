"""Many concurrent A2A tasks: nothing lost, each context keeps its own history; the local store's bound."""

import asyncio
from collections import Counter

import httpx
import pytest
from a2a.server.context import ServerCallContext
from a2a.types.a2a_pb2 import Task, TaskState, TaskStatus

from kora.agent.a2a.store import BoundedTaskStore, RunningOnlyTaskStore
from kora.scripted import TextReply
from tests.support.a2a import message_params, rpc_body
from tests.support.agent import running_agent

pytestmark = pytest.mark.integration

TASKS, CONTEXTS = 200, 20


@pytest.mark.slow
async def test_200_concurrent_tasks_across_20_contexts_all_complete_with_their_own_histories(model):
    model.enqueue(*[TextReply(f"answer {i}") for i in range(TASKS)])
    async with running_agent(model, MEMORY_MAX_SESSION_EVENTS="1000", MEMORY_CONTEXT_LIMIT="4") as agent:
        limits = httpx.Limits(max_connections=TASKS)
        async with httpx.AsyncClient(base_url=agent.url, timeout=120, limits=limits) as http:

            async def send(i: int) -> dict:
                params = message_params(f"question {i}", context_id=f"ctx-{i % CONTEXTS}")
                return (await http.post("/", json=rpc_body("message/send", params, id_=i))).json()

            answers = await asyncio.gather(*(send(i) for i in range(TASKS)))
        tasks = [answer["result"] for answer in answers]
        assert all(task["status"]["state"] == "completed" for task in tasks)
        assert len({task["id"] for task in tasks}) == TASKS
        for context in range(CONTEXTS):
            events = agent.events(f"ctx-{context}")
            assert Counter(e["event_type"] for e in events) == {"user_message": 10, "agent_response": 10}
            questions = {e["content"] for e in events if e["event_type"] == "user_message"}
            assert questions == {f"question {i}" for i in range(context, TASKS, CONTEXTS)}


def _task(task_id: str, state: "TaskState.ValueType") -> Task:
    return Task(id=task_id, context_id="c", status=TaskStatus(state=state))


async def test_the_local_store_evicts_finished_tasks_oldest_first_never_running_ones():
    store = BoundedTaskStore(max_tasks=3)
    context = ServerCallContext()
    await store.save(_task("running", TaskState.TASK_STATE_WORKING), context)
    for name in ("done-1", "done-2", "done-3"):
        await store.save(_task(name, TaskState.TASK_STATE_COMPLETED), context)
    assert await store.get("running", context) is not None
    assert await store.get("done-1", context) is None
    assert len(store) == 3
    for name in ("run-2", "run-3", "run-4"):
        await store.save(_task(name, TaskState.TASK_STATE_WORKING), context)
    assert await store.get("running", context) is not None  # running tasks stay, above the bound if need be
    assert len(store) == 4


async def test_the_null_store_drops_tasks_when_they_finish():
    store = RunningOnlyTaskStore()
    context = ServerCallContext()
    await store.save(_task("t", TaskState.TASK_STATE_WORKING), context)
    assert await store.get("t", context) is not None
    await store.save(_task("t", TaskState.TASK_STATE_COMPLETED), context)
    assert await store.get("t", context) is None
