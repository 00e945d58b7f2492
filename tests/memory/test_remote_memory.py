"""RemoteMemory: real agents bound to the real memory service on a real Postgres with pgvector.

Write-back off the response path, the store's data on the agent's memory endpoints, recall of long-term facts
into the model's context, ``search_memory`` and ``save_memory`` against the store, soft degradation with write
replay when the service is killed and restarted, and strict mode's 503s.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx
import openai
import pytest

from kora.core.errors import Forbidden, RequestError
from kora.memory.base import SESSION_FORBIDDEN, TurnContext
from kora.memory.remote import RemoteMemory
from kora.memory.wire import MAX_ID_CHARS
from kora.scripted.script import Match, Rule, TextReply, ToolCall, ToolCallReply
from tests.support.a2a import message_params, rpc_body
from tests.support.agent import RunningAgent, running_agent
from tests.support.eventually import eventually, eventually_async
from tests.support.memory import ADMIN, AGENT_TOKEN, MemoryProcess, memory_service, model_env, service_env
from tests.support.scripted_server import ScriptedModelServer

pytestmark = pytest.mark.integration


def _facts(url: str, **params: str) -> list[str]:
    return [
        fact["text"] for fact in httpx.get(f"{url}/v1/facts", headers=ADMIN, params=params, timeout=10).json()["facts"]
    ]


async def test_turns_are_written_to_the_store_and_facts_recalled_into_later_turns(
    memory_db: str, model: ScriptedModelServer
) -> None:
    env = service_env(memory_db, summary_model_api_url=model.url, summary_model=model.model_name)
    async with memory_service(env) as store:
        async with running_agent(model, "assistant", MEMORY_STORE_ENDPOINT=store) as agent:
            client = agent.async_openai()
            model.enqueue("Nice to meet you.")
            first = await client.chat.completions.with_raw_response.create(
                model="m", messages=[{"role": "user", "content": "Hello. I live in Lisbon."}]
            )
            session = first.headers["x-session-id"]
            eventually(lambda: len(agent.events(session)) == 2, "turn written to the store", within=30)
            assert agent.event_types(session) == ["user_message", "agent_response"]
            sessions = agent.get("/memory/sessions").json()["sessions"]
            assert [s["session_id"] for s in sessions] == [session]
            assert sessions[0]["user_id"] == "default"  # anonymous, listed as with LocalMemory
            # The scripted model's default extraction keeps the user's first-person sentences.
            eventually(lambda: _facts(store) == ["I live in Lisbon."], "fact extracted", within=30)
            extraction = [r for r in model.requests if "response_format" in r]
            assert extraction[0]["response_format"]["json_schema"]["name"] == "extracted_facts"

            model.enqueue("You live in Lisbon.")
            await client.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": "Where do I live?"}],
                extra_headers={"X-Session-ID": session},
            )
            sent = model.requests[-1]["messages"]
            system = " ".join(m["content"] for m in sent if m["role"] == "system")
            assert "I live in Lisbon." in system  # the long-term fact, recalled for the prompt
            assert [m["content"] for m in sent if m["role"] == "user"] == [
                "Hello. I live in Lisbon.",
                "Where do I live?",
            ]


async def test_remote_memory_recalls_across_sessions_only_for_a_verified_user(memory_db: str) -> None:
    async with memory_service(service_env(memory_db)) as store:
        alice = RemoteMemory(store, "assistant", token=AGENT_TOKEN, max_read_scope="agent")
        await alice.start()
        try:
            fact_id = await alice.save("s1", "The user's cat is called Miso.", user_id="alice")
            assert fact_id.startswith("fact_")
            # Recallable as soon as save returns, from another session of the same user.
            hits = await alice.search("s2", "what is my cat called", scope="agent", user_id="alice")
            assert [hit.text for hit in hits] == ["The user's cat is called Miso."]
            context = await alice.turn_context("s2", "what is my cat called", 6, user_id="alice")
            assert [hit.text for hit in context.facts] == ["The user's cat is called Miso."]
            # Another user, or no verified user, never sees it.
            assert await alice.search("s3", "cat called", scope="agent", user_id="bob") == []
            anonymous = await alice.turn_context("s3", "what is my cat called", 6, user_id=None)
            assert anonymous.facts == []
            with pytest.raises(ValueError, match="needs a signed-in user"):
                await alice.search("s3", "cat", scope="agent", user_id=None)
            with pytest.raises(ValueError, match="ceiling"):
                await alice.search("s1", "cat", scope="user", user_id="alice")
        finally:
            await alice.close()


async def test_memory_tools_read_and_write_the_store(memory_db: str, model: ScriptedModelServer) -> None:
    async with memory_service(service_env(memory_db)) as store:
        async with running_agent(model, "assistant", MEMORY_STORE_ENDPOINT=store, MEMORY_TOOLS="all") as agent:
            model.load_script(
                [
                    Rule(
                        Match(user_matches="remember", after_tool=False),
                        ToolCallReply([ToolCall("save_memory", {"content": "The user's favourite colour is teal."})]),
                    ),
                    Rule(
                        Match(user_matches="colour", after_tool=False),
                        ToolCallReply([ToolCall("search_memory", {"query": "favourite colour", "level": "session"})]),
                    ),
                    Rule(Match(after_tool=True), TextReply("Done: {tool_result}")),
                ]
            )
            client = agent.async_openai()
            saved = await client.chat.completions.with_raw_response.create(
                model="m", messages=[{"role": "user", "content": "Please remember teal."}]
            )
            session = saved.headers["x-session-id"]
            assert saved.parse().choices[0].message.content.startswith("Done: Saved (fact_")
            assert _facts(store) == ["The user's favourite colour is teal."]
            found = await client.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": "What is my colour?"}],
                extra_headers={"X-Session-ID": session},
            )
            assert "favourite colour is teal" in found.choices[0].message.content


async def test_a_search_repeated_five_times_returns_the_same_facts_not_its_own_earlier_calls(
    memory_db: str, model: ScriptedModelServer
) -> None:
    async with memory_service(service_env(memory_db)) as store:
        async with running_agent(model, "assistant", MEMORY_STORE_ENDPOINT=store, MEMORY_TOOLS="all") as agent:
            model.load_script(
                [
                    Rule(
                        Match(user_matches="remember", after_tool=False),
                        ToolCallReply([ToolCall("save_memory", {"content": "The user's favourite colour is teal."})]),
                    ),
                    Rule(
                        Match(user_matches="colour", after_tool=False),
                        ToolCallReply([ToolCall("search_memory", {"query": "favourite colour", "level": "session"})]),
                    ),
                    Rule(Match(after_tool=True), TextReply("Found: {tool_result}")),
                ]
            )
            client = agent.async_openai()
            saved = await client.chat.completions.with_raw_response.create(
                model="m", messages=[{"role": "user", "content": "Please remember teal."}]
            )
            session = saved.headers["x-session-id"]
            results = []
            for _ in range(5):
                await client.chat.completions.create(
                    model="m",
                    messages=[{"role": "user", "content": "What is my favourite colour?"}],
                    extra_headers={"X-Session-ID": session},
                )
                searched = len(results) + 1
                eventually(lambda n=searched: len(_search_results(agent, session)) == n, "search stored", within=30)
                results.append(_search_results(agent, session)[-1])
            # The same answer every time: the fact, and none of the earlier searches, their questions, results or the
            # answers that quoted them (which all say "favourite colour" too).
            assert all(result == results[0] for result in results), results
            assert "The user's favourite colour is teal." in results[0]
            assert "search_memory" not in results[0]
            assert "Found:" not in results[0]


def _search_results(agent: RunningAgent, session: str) -> list[str]:
    """The text each ``search_memory`` call of ``session`` returned, oldest first."""
    return [
        str(e["content"]["content"])
        for e in agent.events(session)
        if e["event_type"] == "tool_result" and e["content"]["tool_name"] == "search_memory"
    ]


async def test_soft_mode_keeps_answering_and_replays_writes_when_the_store_returns(
    memory_db: str, model: ScriptedModelServer, tmp_path: Path
) -> None:
    store = MemoryProcess(service_env(memory_db), tmp_path / "memory.log").start()
    try:
        async with running_agent(model, "assistant", MEMORY_STORE_ENDPOINT=store.url) as agent:
            client = agent.async_openai()
            model.enqueue("one")
            first = await client.chat.completions.with_raw_response.create(
                model="m", messages=[{"role": "user", "content": "first"}]
            )
            session = first.headers["x-session-id"]
            eventually(lambda: len(agent.events(session)) == 2, "first turn stored", within=30)
            store.kill()
            model.enqueue("two")
            second = await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "second"}], extra_headers={"X-Session-ID": session}
            )
            assert second.choices[0].message.content == "two"
            # The agent replayed its own window: the first turn reached the model with the second prompt.
            assert [m["content"] for m in model.requests[-1]["messages"] if m["role"] == "user"] == ["first", "second"]
            ready = agent.get("/ready")
            assert ready.status_code == 200
            assert ready.json()["details"]["memory"].startswith("degraded")
            store.start()
            # Replayed without another turn: the store ends up with both turns, in order.
            eventually(
                lambda: [e["content"] for e in agent.events(session)] == ["first", "one", "second", "two"],
                "queued writes replayed",
                within=30,
            )
            eventually(lambda: "details" not in agent.get("/ready").json(), "degraded cleared", within=30)
    finally:
        store.kill()


async def test_strict_mode_answers_503_while_the_store_is_down(
    memory_db: str, model: ScriptedModelServer, tmp_path: Path
) -> None:
    store = MemoryProcess(service_env(memory_db), tmp_path / "memory.log").start()
    try:
        async with running_agent(
            model, "assistant", MEMORY_STORE_ENDPOINT=store.url, MEMORY_FAILURE_MODE="strict"
        ) as agent:
            store.kill()
            # The first turn after the store went away finds it out itself: still the JSON-RPC error, no task.
            async with httpx.AsyncClient(timeout=30) as http:
                first = await http.post(f"{agent.url}/", json=rpc_body("message/send", message_params("hi"), id_=3))
            assert first.json()["error"]["data"] == {"type": "memory_unavailable"}, first.text
            assert first.json()["id"] == 3
            # The SDK still files the refused request's task, failed with the reason (the client never gets its id).
            async with httpx.AsyncClient(timeout=30) as http:
                listed = await http.get(f"{agent.url}/tasks", headers={"A2A-Version": "1.0"})
            filed = listed.json().get("tasks", [])
            assert [task["status"]["state"] for task in filed] in ([], ["TASK_STATE_FAILED"]), listed.text
            with pytest.raises(openai.APIStatusError) as caught:
                await agent.async_openai().chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}]
                )
            assert caught.value.status_code == 503
            assert caught.value.body["code"] == "memory_unavailable"  # type: ignore[index]
            assert agent.get("/ready").status_code == 503
            assert "memory store unreachable" in agent.get("/ready").json()["reasons"][0]
            # A2A: the JSON-RPC error, no task (sent and streamed, in 0.3 and 1.0).
            async with httpx.AsyncClient(timeout=30) as http:
                for method, version in (("message/send", None), ("message/stream", None), ("SendMessage", "1.0")):
                    headers = {"A2A-Version": version} if version else {}
                    answer = await http.post(
                        f"{agent.url}/", json=rpc_body(method, message_params("hi"), id_=7), headers=headers
                    )
                    assert answer.status_code == 200, (method, answer.text)
                    body = answer.json()
                    assert "result" not in body, (method, body)
                    assert body["id"] == 7
                    assert body["error"]["code"] == -32603
                    assert "memory store is unavailable" in body["error"]["message"]
                    if version is None:
                        assert body["error"]["data"] == {"type": "memory_unavailable"}
                # The HTTP+JSON binding: the binding's error body, no task.
                rest = {"message": {"role": "ROLE_USER", "messageId": "m-rest", "parts": [{"text": "hi"}]}}
                answer = await http.post(f"{agent.url}/message:send", json=rest, headers={"A2A-Version": "1.0"})
                assert answer.status_code == 503, answer.text
                assert "memory store is unavailable" in answer.json()["error"]["message"]
                # Refused before the SDK saw them: no task more than the first request's.
                listed = await http.get(f"{agent.url}/tasks", headers={"A2A-Version": "1.0"})
                assert listed.status_code == 200, listed.text
                assert listed.json().get("tasks", []) == filed, listed.text
            store.start()
            eventually(lambda: agent.get("/ready").status_code == 200, "ready again", within=30)
            model.enqueue("back")
            answer = await agent.async_openai().chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}]
            )
            assert answer.choices[0].message.content == "back"
    finally:
        store.kill()


async def test_closing_sends_what_is_queued(memory_db: str) -> None:
    async with memory_service(service_env(memory_db)) as store:
        memory = RemoteMemory(store, "assistant", token=AGENT_TOKEN)
        await memory.start()
        for n in range(5):
            await memory.add_events("s1", [memory.create_event("user_message", f"m{n}")])
        # Let the background sender take the first batch, so close() drains while a send is in flight.
        await asyncio.sleep(0)
        await memory.close()
        events = httpx.get(f"{store}/v1/sessions/s1/events", headers=ADMIN, params={"app_name": "assistant"}).json()[
            "events"
        ]
        assert [e["content"] for e in events] == [f"m{n}" for n in range(5)]


async def test_rolling_summary_and_window_leave_no_turn_out(memory_db: str, model: ScriptedModelServer) -> None:
    """20 turns through RemoteMemory with a rolling summary and the default window of 6 events: before every turn,
    the summary covers turns 1..k and the window holds exactly turns k+1.. up to the last, whether a fold is
    pending or done; once the folds are done, the window is short again (what left it was folded)."""
    # The fold's answer names the last turn it read: "Summary to k."
    model.load_script(
        [Rule(Match(user_matches=r"(?s)Conversation:\n.*assistant: answer (?P<n>\d+)"), TextReply("Summary to {n}."))]
    )
    env = service_env(memory_db, **model_env(model.url), long_term_enabled="false", compaction_trigger="4", workers="1")
    async with memory_service(env) as store:
        memory = RemoteMemory(store, "assistant", token=AGENT_TOKEN, rolling_summary=True)
        await memory.start()
        try:

            async def covered(context: TurnContext, last: int) -> int:
                """k, after checking that summary (turns 1..k) and window (k+1..last) leave nothing out."""
                summary = re.fullmatch(r"Summary to (\d+)\.", context.summary or "Summary to 0.")
                assert summary is not None, context.summary
                k = int(summary.group(1))
                expected = [text for n in range(k + 1, last + 1) for text in (f"turn {n} question", f"answer {n}")]
                assert [event.content for event in context.events] == expected, (k, last)
                return k

            for n in range(1, 21):
                await covered(await memory.turn_context("s1", f"turn {n} question", 6), n - 1)
                await memory.add_events(
                    "s1",
                    [
                        memory.create_event("user_message", f"turn {n} question"),
                        memory.create_event("agent_response", f"answer {n}"),
                    ],
                )

            async def folded() -> TurnContext | None:
                jobs = httpx.get(f"{store}/v1/jobs", headers=ADMIN, timeout=10).json()["jobs"]
                context = await memory.turn_context("s1", "next", 6)
                return None if jobs or memory._outbox else context

            final = await eventually_async(folded, "the folds of 20 turns")
            k = await covered(final, 20)
            # Folds run once 4 events left the client's 6-event window: at most 3 unfolded events besides it.
            assert k >= 15
            assert 6 <= len(final.events) < 6 + 4
        finally:
            await memory.close()


async def test_a_refused_conversation_metadata_write_is_the_stores_refusal_not_a_503(memory_db: str) -> None:
    async with memory_service(service_env(memory_db)) as store:
        memory = RemoteMemory(store, "assistant", token=AGENT_TOKEN)
        await memory.start()
        try:
            await memory.set_session_metadata("s1", {"topic": "cats"}, user_id="alice")
            assert await memory.session_metadata("s1") == {"topic": "cats"}
            # Another user's session: the 403 session_forbidden the store answered, not "unavailable".
            with pytest.raises(Forbidden) as forbidden:
                await memory.set_session_metadata("s1", {"topic": "dogs"}, user_id="bob")
            assert (forbidden.value.status, forbidden.value.code) == (403, SESSION_FORBIDDEN)
            # A session id beyond the store's bounds: its 400 and its code.
            with pytest.raises(RequestError) as refused:
                await memory.set_session_metadata("s" * (MAX_ID_CHARS + 1), {"topic": "cats"}, user_id="alice")
            assert refused.value.status == 400
            assert refused.value.code not in (None, "memory_unavailable"), refused.value.code
            assert await memory.session_metadata("s1") == {"topic": "cats"}
        finally:
            await memory.close()
