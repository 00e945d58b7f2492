"""Calls waiting for approval outlive the agent process with the shared task store (``TASK_STORE_TYPE=postgres``):
real ``kora agent`` processes on 127.0.0.1 over one real Postgres, an inline-tool MCP server and the scripted model.
An agent killed (SIGKILL) while a call waits is started again: it lists the call on ``GET /approvals``, a decision
(REST, or the next A2A message on the task) runs the tool once and the turn finishes in its task; a call whose time
ran out while no agent ran is rejected by the restarted agent, and its task completes."""

from __future__ import annotations

import asyncio
import calendar
import contextlib
import json
import os
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import psycopg
import pytest
from a2a.types.a2a_pb2 import GetTaskRequest, Task, TaskState
from a2a.utils.errors import A2AError

from kora.core.net import free_port
from kora.scripted import ToolCall, ToolCallReply
from tests.support.a2a import decision_message, sdk_client, send, user_message
from tests.support.agent import mcp_app
from tests.support.calc import RAN, add
from tests.support.eventually import eventually, eventually_async
from tests.support.memory import fresh_database, start_postgres
from tests.support.processes import kora_process, wait_healthy
from tests.support.scripted_server import ScriptedModelServer
from tests.support.threaded import ThreadedServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

USER_HEADER = "X-Test-User"


@pytest.fixture(autouse=True)
def _fresh_ledger() -> None:
    RAN.clear()


@contextlib.contextmanager
def agent(model: ScriptedModelServer, database: str, tools: str, **extra: str) -> Iterator[tuple[str, int]]:
    """A ``kora agent`` process whose ``add`` tool needs approval, its tasks and paused turns in ``database``;
    yields its URL once ready and its pid."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        "AGENT_NAME": "keeper",
        "MODEL_API_URL": model.url,
        "MODEL_NAME": model.model_name,
        "MODEL_MAX_RETRIES": "0",
        "AGENT_HOST": "127.0.0.1",
        "AGENT_PORT": str(port),
        "AUTH_TRUSTED_USER_HEADER": USER_HEADER,
        "TASK_STORE_TYPE": "postgres",
        "TASK_STORE_URL": database,
        "MCP_SERVERS": "calc",
        "MCP_SERVER_CALC_URL": tools,
        "TOOL_APPROVAL_REQUIRED": "calc/add",
        **extra,
    }
    with kora_process(["agent"], env, f"{url}/health") as process:
        wait_healthy(f"{url}/ready", process)
        yield url, process.pid


def kill(pid: int) -> None:
    """SIGKILL the agent and wait until it is gone (its port closed)."""
    os.kill(pid, signal.SIGKILL)

    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        return False

    eventually(gone, "the killed agent exited")


def pending(url: str, user: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{url}/approvals", headers={USER_HEADER: user}, timeout=30)
    assert response.status_code == 200, response.text
    return list(response.json()["approvals"])


async def paused_task(url: str, http: httpx.AsyncClient, context_id: str) -> Task:
    client = await sdk_client(url, http=http, version="1.0")
    task = await send(client, user_message("add them", context_id=context_id))
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    return task


async def wait_state(url: str, http: httpx.AsyncClient, task: Task, state: int) -> Task:
    client = await sdk_client(url, http=http, version="1.0")

    seen: list[str] = []

    async def reached() -> Task | None:
        fetched = await client.get_task(GetTaskRequest(id=task.id))
        seen[:] = [TaskState.Name(fetched.status.state)]
        return fetched if fetched.status.state == state else None

    return await eventually_async(
        reached, f"the task {TaskState.Name(state)}", every=0.1, explain=lambda: f"last seen: {seen}"
    )


@pytest.mark.parametrize("decided_by", ["rest", "a2a"])
async def test_an_agent_killed_while_a_call_waits_resumes_it_once_restarted(model, memory_db, decided_by):
    model.enqueue(ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]), "The sum is 3.")
    async with (
        ThreadedServer(mcp_app("calc", [add]), name="calc", lifespan="on") as calc,
        httpx.AsyncClient(timeout=60, headers={USER_HEADER: "alice"}) as http,
    ):
        with agent(model, memory_db, calc.root_url) as (first, pid):
            task = await paused_task(first, http, "ctx-kept")
            [waiting] = pending(first, "alice")
            kill(pid)
        assert RAN == []
        assert len(model.requests) == 1

        with agent(model, memory_db, calc.root_url) as (second, _):
            [listed] = pending(second, "alice")
            assert listed == waiting
            assert pending(second, "bob") == []
            if decided_by == "rest":
                decided = httpx.post(
                    f"{second}/approvals/{waiting['id']}",
                    json={"decision": "approve"},
                    headers={USER_HEADER: "alice"},
                    timeout=60,
                )
                assert decided.status_code == 200, decided.text
                assert decided.json()["turn"]["text"] == "The sum is 3."
                done = await wait_state(second, http, task, TaskState.TASK_STATE_COMPLETED)
            else:
                client = await sdk_client(second, http=http, version="1.0")
                done = await send(client, decision_message(task, {"decision": "approve"}))
                assert done.status.state == TaskState.TASK_STATE_COMPLETED
            assert done.artifacts[0].parts[0].text == "The sum is 3."
            assert RAN == [{"a": 1, "b": 2}]
            assert [m["content"] for m in model.requests[1]["messages"] if m["role"] == "tool"] == ["3"]
            assert pending(second, "alice") == []
            again = httpx.post(
                f"{second}/approvals/{waiting['id']}",
                json={"decision": "approve"},
                headers={USER_HEADER: "alice"},
                timeout=60,
            )
            assert again.status_code == 409

        # A third start finds nothing waiting any more: the call ran once.
        with agent(model, memory_db, calc.root_url) as (third, _):
            assert pending(third, "alice") == []
    assert RAN == [{"a": 1, "b": 2}]
    assert len(model.requests) == 2


async def test_a_call_whose_time_ran_out_while_no_agent_ran_expires_when_one_starts(model, memory_db):
    model.enqueue(ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]), "Nobody answered.")
    async with (
        ThreadedServer(mcp_app("calc", [add]), name="calc", lifespan="on") as calc,
        httpx.AsyncClient(timeout=60, headers={USER_HEADER: "alice"}) as http,
    ):
        with agent(model, memory_db, calc.root_url, TOOL_APPROVAL_TIMEOUT_SECONDS="10") as (first, pid):
            task = await paused_task(first, http, "ctx-late")
            [waiting] = pending(first, "alice")
            kill(pid)
        assert len(model.requests) == 1  # the first agent was killed before the call expired
        expires = calendar.timegm(time.strptime(waiting["expires_at"], "%Y-%m-%dT%H:%M:%SZ"))
        await asyncio.sleep(max(expires + 1 - time.time(), 0))  # past its expiry while no agent runs

        with agent(model, memory_db, calc.root_url, TOOL_APPROVAL_TIMEOUT_SECONDS="10") as (second, _):
            done = await wait_state(second, http, task, TaskState.TASK_STATE_COMPLETED)
            assert done.artifacts[0].parts[0].text == "Nobody answered."
            assert pending(second, "alice") == []
    assert RAN == []
    assert [m["content"] for m in model.requests[1]["messages"] if m["role"] == "tool"] == [
        "Error: the call was rejected: nobody approved the call within 10 seconds"
    ]


async def test_chat_an_agent_killed_while_a_call_waits_takes_the_decision_once_restarted(model, memory_db):
    model.enqueue(ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]), "The sum is 3.")
    headers = {"X-Session-ID": "chat-kept", USER_HEADER: "alice"}
    asked = [{"role": "user", "content": "add them"}]
    async with ThreadedServer(mcp_app("calc", [add]), name="calc", lifespan="on") as calc:
        with agent(model, memory_db, calc.root_url) as (first, pid):
            chat = openai.OpenAI(base_url=f"{first}/v1", api_key="unused")
            answer = chat.chat.completions.create(model="keeper", messages=asked, extra_headers=headers)
            assert answer.choices[0].finish_reason == "tool_calls"
            message = answer.choices[0].message
            [call] = message.tool_calls
            kill(pid)
        with agent(model, memory_db, calc.root_url) as (second, _):
            [listed] = pending(second, "alice")
            assert call.model_dump()["kora_approval"]["id"] == listed["id"]
            chat = openai.OpenAI(base_url=f"{second}/v1", api_key="unused")
            decision = {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"decision": "approve"})}
            conversation = [*asked, message.model_dump(exclude_none=True), decision]
            done = chat.chat.completions.create(model="keeper", messages=conversation, extra_headers=headers)
            assert done.choices[0].finish_reason == "stop"
            assert done.choices[0].message.content == "The sum is 3."
            assert RAN == [{"a": 1, "b": 2}]
            with pytest.raises(openai.ConflictError):
                chat.chat.completions.create(model="keeper", messages=conversation, extra_headers=headers)
            assert RAN == [{"a": 1, "b": 2}]
            assert pending(second, "alice") == []


async def test_a_call_paused_on_one_replica_is_listed_and_decided_on_another_once(model, memory_db):
    model.enqueue(ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]), "The sum is 3.")
    async with (
        ThreadedServer(mcp_app("calc", [add]), name="calc", lifespan="on") as calc,
        httpx.AsyncClient(timeout=60, headers={USER_HEADER: "alice"}) as http,
    ):
        with (
            agent(model, memory_db, calc.root_url) as (one, _),
            agent(model, memory_db, calc.root_url) as (two, _),
        ):
            task = await paused_task(one, http, "ctx-replicas")
            # Waiting, the task runs nowhere: it holds no lease, so no replica ends it failed as abandoned.
            with psycopg.connect(memory_db) as connection:
                leases = connection.execute("SELECT count(*) FROM kora_a2a.task_leases WHERE task_id = %s", (task.id,))
                assert leases.fetchone() == (0,)
            [waiting] = pending(one, "alice")
            assert pending(two, "alice") == [waiting]
            decided = httpx.post(
                f"{two}/approvals/{waiting['id']}",
                json={"decision": "approve"},
                headers={USER_HEADER: "alice"},
                timeout=60,
            )
            assert decided.status_code == 200, decided.text
            assert decided.json()["turn"]["text"] == "The sum is 3."
            done = await wait_state(one, http, task, TaskState.TASK_STATE_COMPLETED)
            assert done.artifacts[0].parts[0].text == "The sum is 3."
            # The replica that paused it no longer lists it, and cannot resume it a second time.
            assert pending(one, "alice") == []
            client = await sdk_client(one, http=http, version="1.0")
            with pytest.raises(A2AError):
                await send(client, decision_message(task, {"decision": "approve"}))
    assert RAN == [{"a": 1, "b": 2}]
    assert len(model.requests) == 2


async def test_erasing_a_user_on_one_replica_erases_the_calls_paused_on_another(model, memory_db):
    # The turn pauses on the first replica; the user is erased through the second, which never held the turn:
    # its row goes from the shared journal, so no replica lists it again or resumes it.
    model.enqueue(ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]), "The sum is 3.")
    token = {"AGENT_ADMIN_TOKEN": "operator-secret"}
    async with (
        ThreadedServer(mcp_app("calc", [add]), name="calc", lifespan="on") as calc,
        httpx.AsyncClient(timeout=60, headers={USER_HEADER: "alice"}) as http,
    ):
        with (
            agent(model, memory_db, calc.root_url, **token) as (one, _),
            agent(model, memory_db, calc.root_url, **token) as (two, _),
        ):
            await paused_task(one, http, "ctx-erased")
            assert len(pending(one, "alice")) == 1
            erased = httpx.delete(
                f"{two}/memory/users/alice", headers={"Authorization": "Bearer operator-secret"}, timeout=60
            )
            assert erased.status_code in (200, 204), erased.text
            with psycopg.connect(memory_db) as connection:
                rows = connection.execute("SELECT count(*) FROM kora_a2a.paused_turns WHERE agent = 'keeper'")
                assert rows.fetchone() == (0,)
            assert pending(two, "alice") == []
            assert pending(one, "alice") == []
    assert RAN == []


async def test_with_the_task_database_down_approvals_lists_the_calls_this_agent_holds_and_says_so(model):
    # A Postgres of this test's own, stopped while the agent runs (its socket path kept short).
    model.enqueue(ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]), "The sum is 3.")
    with contextlib.ExitStack() as database:
        admin = database.enter_context(start_postgres(Path(tempfile.mkdtemp(dir="/tmp")) / "pgdata"))
        async with (
            ThreadedServer(mcp_app("calc", [add]), name="calc", lifespan="on") as calc,
            httpx.AsyncClient(timeout=60, headers={USER_HEADER: "alice"}) as http,
        ):
            with agent(model, fresh_database(admin), calc.root_url) as (url, _):
                await paused_task(url, http, "ctx-down")
                listed = httpx.get(f"{url}/approvals", headers={USER_HEADER: "alice"}, timeout=60)
                assert listed.status_code == 200, listed.text
                assert listed.json()["local_only"] is False
                [waiting] = listed.json()["approvals"]

                database.close()  # the database stops; the agent runs on
                down = httpx.get(f"{url}/approvals", headers={USER_HEADER: "alice"}, timeout=60)
                assert down.status_code == 200, down.text
                assert down.json() == {"agent": "keeper", "approvals": [waiting], "total": 1, "local_only": True}
    assert RAN == []


async def test_a_new_prompt_on_another_replica_is_refused_at_once_while_a_call_waits(model, memory_db):
    # The turn pauses on the first replica; the second never loaded it, yet refuses a new turn in the session
    # as the first does, over Chat Completions and A2A, with nothing asked of the model.
    model.enqueue(ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]), "The sum is 3.")
    async with (
        ThreadedServer(mcp_app("calc", [add]), name="calc", lifespan="on") as calc,
        httpx.AsyncClient(timeout=60, headers={USER_HEADER: "alice"}) as http,
    ):
        with (
            agent(model, memory_db, calc.root_url) as (one, _),
            agent(model, memory_db, calc.root_url) as (two, _),
        ):
            await paused_task(one, http, "ctx-busy")
            refusals = []
            for url in (one, two):
                chat = openai.OpenAI(base_url=f"{url}/v1", api_key="unused")
                with pytest.raises(openai.ConflictError) as refused:
                    chat.chat.completions.create(
                        model="keeper",
                        messages=[{"role": "user", "content": "something else"}],
                        extra_headers={"X-Session-ID": "ctx-busy", USER_HEADER: "alice"},
                    )
                assert refused.value.code == "approval_pending"
                refusals.append(refused.value.body)
            assert refusals[0] == refusals[1]
            assert "The session waits for decisions on tool calls: add (appr_" in str(refusals[1])

            client = await sdk_client(two, http=http, version="1.0")
            failed = await send(client, user_message("something else", context_id="ctx-busy"))
            assert failed.status.state == TaskState.TASK_STATE_FAILED
            assert failed.status.message.parts[0].text == refusals[1]["message"]
    assert len(model.requests) == 1
    assert RAN == []
