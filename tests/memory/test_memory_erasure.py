"""Forget everywhere (docs/memory.md, "Erasure"): one erasure of a user or a session reaches the store, every bound
agent's local window and queue of unsent writes, and LocalMemory; the answer counts what went per tier. Real agents,
the real ``kora memory`` process on a real Postgres; the tests look in Postgres directly and in every agent process.

The rule held: an agent that reached its store after an erasure never replays or lists erased events, whatever
happens to the store later.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kora.memory.remote import RemoteMemory
from tests.support.agent import OPERATOR, RunningAgent, agent_client, running_agent
from tests.support.eventually import eventually
from tests.support.identity import identity_provider, new_key
from tests.support.memory import ADMIN, AGENT, MemoryProcess, memory_service, service_env
from tests.support.scripted_server import ScriptedModelServer

pytestmark = pytest.mark.integration

APP = "assistant"
USER = "X-User"
SECRET, OTHER_SECRET, BOBS = "tangerine", "plum", "bergamot"


def _turn(agent: RunningAgent, user: str, text: str, session: str | None = None) -> str:
    headers = {USER: user} | ({"X-Session-ID": session} if session else {})
    response = httpx.post(
        f"{agent.url}/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": text}]},
        headers=headers,
        timeout=60,
    )
    assert response.status_code == 200, response.text
    return response.headers["x-session-id"]


def _delete(agent: RunningAgent, path: str, headers: dict[str, str]) -> httpx.Response:
    return httpx.delete(f"{agent.url}{path}", headers=headers, timeout=60)


def _everything_in_postgres(database_url: str) -> str:
    """Every row of every table that holds users' data, as text."""
    with psycopg.connect(database_url) as conn:
        tables = ("sessions", "events", "summaries", "facts", "fact_history", "jobs")
        return " ".join(
            str(row) for table in tables for row in conn.execute(f"SELECT t::text FROM {table} t").fetchall()
        )


def _memory(agent: RunningAgent) -> Any:
    return agent.server.app.state.kora.memory


def _held_by(agent: RunningAgent) -> str:
    """What the agent process holds, as text: its memory endpoints as the operator (with the store down: its own
    window), and, read in the process itself, its local window (RemoteMemory's, or LocalMemory) and its outbox."""
    memory = _memory(agent)
    local = getattr(memory, "_local", memory)
    window = [[s.session_id, s.owner, [e.content for e in s.events]] for s in list(local._sessions.values())]
    outbox = [e.model_dump(mode="json") for batch in list(getattr(memory, "_outbox", [])) for e in batch.events]
    endpoints = [agent.get("/memory/events").text, agent.get("/memory/sessions").text]
    return " ".join([*endpoints, json.dumps(window, default=str), json.dumps(outbox)])


async def test_local_memory_erases_a_user_and_a_session_and_refuses_others(model: ScriptedModelServer) -> None:
    async with running_agent(model, APP, AUTH_TRUSTED_USER_HEADER=USER) as agent:
        for _ in range(4):
            model.enqueue("Noted.")
        alices = _turn(agent, "alice", f"My secret is {SECRET}.")
        alices_second = _turn(agent, "alice", f"Also {OTHER_SECRET}.")
        bobs = _turn(agent, "bob", f"I like {BOBS}.")
        # No credential: 401; another user: 403; nothing erased.
        assert _delete(agent, "/memory/users/alice", {}).status_code == 401
        assert _delete(agent, "/memory/users/alice", {USER: "bob"}).status_code == 403
        assert _delete(agent, f"/memory/sessions/{alices}", {USER: "bob"}).status_code == 403
        assert _delete(agent, f"/memory/sessions/{bobs}", {}).status_code == 401
        assert _delete(agent, "/memory/users/alice", {"Authorization": "Bearer wrong"}).status_code == 401
        assert SECRET in _held_by(agent)
        # Alice erases one of her sessions herself.
        erased = _delete(agent, f"/memory/sessions/{alices_second}", {USER: "alice"})
        assert erased.status_code == 200, erased.text
        assert erased.json() == {"removed": {"sessions": 1, "events": 2, "facts": 0}}
        assert OTHER_SECRET not in _held_by(agent)
        # The operator erases alice: her last session goes, bob's stays.
        erased = _delete(agent, "/memory/users/alice", OPERATOR)
        assert erased.json() == {"removed": {"sessions": 1, "events": 2, "facts": 0}}
        held = _held_by(agent)
        assert SECRET not in held
        assert BOBS in held
        assert [s["session_id"] for s in agent.get("/memory/sessions").json()["sessions"]] == [bobs]
        # Her old session id starts empty: nothing of hers reaches the model.
        model.enqueue("Hello again.")
        _turn(agent, "alice", "What did I tell you?", alices)
        assert SECRET not in json.dumps(model.requests[-1])
        # Erasing again finds nothing.
        assert _delete(agent, "/memory/users/alice", {USER: "alice"}).json()["removed"]["sessions"] == 1


async def test_an_erasure_reaches_the_store_and_both_replicas_even_once_the_store_is_down(
    memory_db: str, model: ScriptedModelServer, tmp_path: Path
) -> None:
    store = MemoryProcess(service_env(memory_db), tmp_path / "memory.log").start()
    env = {"MEMORY_STORE_ENDPOINT": store.url, "AUTH_TRUSTED_USER_HEADER": USER}
    try:
        async with running_agent(model, APP, **env) as first, running_agent(model, APP, **env) as second:
            for _ in range(6):
                model.enqueue("Noted.")
            alices = _turn(first, "alice", f"My secret is {SECRET}.")
            alices_other = _turn(second, "alice", f"My other secret is {OTHER_SECRET}.")
            bobs = _turn(second, "bob", f"I like {BOBS}.")
            fact = {"content": f"Alice's secret is {SECRET}.", "app_name": APP, "user_id": "alice"}
            assert httpx.post(f"{store.url}/v1/facts", json=fact, headers=AGENT, timeout=30).status_code == 200
            eventually(lambda: first.get("/memory/events").json()["total"] == 6, "turns stored", within=30)

            erased = _delete(first, "/memory/users/alice", OPERATOR)
            assert erased.status_code == 200, erased.text
            removed = erased.json()["removed"]
            assert (removed["sessions"], removed["events"], removed["facts"]) == (2, 4, 1)
            assert (removed["local_sessions"], removed["local_events"], removed["outbox_events"]) == (1, 2, 0)
            # The store holds nothing of hers, looked at in Postgres itself.
            rows = _everything_in_postgres(memory_db)
            assert SECRET not in rows
            assert OTHER_SECRET not in rows
            assert "alice" not in rows
            assert BOBS in rows

            # The second replica reaches its store once after the erasure (bob's next turn), then the store goes.
            _turn(second, "bob", "Still there?", bobs)
            store.kill()
            for agent in (first, second):
                held = _held_by(agent)
                assert SECRET not in held
                assert OTHER_SECRET not in held
            assert BOBS in _held_by(second)  # what was not erased is still served from its window
            # A turn in her old session on the second replica replays nothing of hers, from its own window.
            model.enqueue("Hello again.")
            _turn(second, "alice", "What did I tell you?", alices_other)
            assert OTHER_SECRET not in json.dumps(model.requests[-1])
            model.enqueue("Hello again.")
            _turn(first, "alice", "And here?", alices)
            assert SECRET not in json.dumps(model.requests[-1])
    finally:
        store.kill()


async def test_an_erasure_while_the_store_is_down_erases_the_agent_and_never_lets_queued_writes_back(
    memory_db: str, model: ScriptedModelServer, tmp_path: Path
) -> None:
    store = MemoryProcess(service_env(memory_db), tmp_path / "memory.log").start()
    env = {"MEMORY_STORE_ENDPOINT": store.url, "AUTH_TRUSTED_USER_HEADER": USER}
    try:
        async with running_agent(model, APP, **env) as agent:
            for _ in range(3):
                model.enqueue("Noted.")
            alices = _turn(agent, "alice", f"My secret is {SECRET}.")
            eventually(lambda: agent.get("/memory/events").json()["total"] == 2, "turn stored", within=30)
            store.kill()
            _turn(agent, "alice", f"Also {OTHER_SECRET}.", alices)  # queued: the store is down
            assert OTHER_SECRET in _held_by(agent)

            refused = _delete(agent, "/memory/users/alice", OPERATOR)
            assert refused.status_code == 503
            assert refused.json()["error"]["code"] == "memory_unavailable"
            held = _held_by(agent)  # this agent's copies went at once
            assert SECRET not in held
            assert OTHER_SECRET not in held

            store.start()
            eventually(lambda: "details" not in agent.get("/ready").json(), "store back", within=30)
            rows = _everything_in_postgres(memory_db)
            assert OTHER_SECRET not in rows  # the queued write never reached the store
            assert SECRET in rows  # what the store held before stays until the erasure is asked again
            erased = _delete(agent, "/memory/users/alice", OPERATOR)
            assert erased.status_code == 200, erased.text
            assert erased.json()["removed"]["events"] == 2
            assert "alice" not in _everything_in_postgres(memory_db)
    finally:
        store.kill()


async def test_the_store_drops_writes_queued_before_an_erasure_of_their_session_or_user(memory_db: str) -> None:
    async with memory_service(service_env(memory_db)) as url:
        old = RemoteMemory(url, APP, token="")  # only to build events with their timestamps
        before = [old.create_event("user_message", f"My secret is {SECRET}.")]
        async with httpx.AsyncClient(base_url=url, headers=ADMIN, timeout=30) as client:
            first = await client.post(
                "/v1/sessions/s1/events", json={"app_name": APP, "user_id": "alice", "events": [_dump(before[0])]}
            )
            mark = first.headers["kora-erasures"]
            assert mark.endswith(":0")
            assert (await client.post("/v1/forget", json={"user_id": "alice"})).status_code == 200
            log = (await client.get("/v1/erasures")).json()
            assert [(e["seq"], e["user_id"]) for e in log["erasures"]] == [(1, "alice")]
            # Queued by an agent that had seen the mark before the erasure: dropped, in any session of hers.
            late = {"app_name": APP, "user_id": "alice", "events": [_dump(before[0])], "erasures_seen": mark}
            for session in ("s1", "s2"):
                written = await client.post(f"/v1/sessions/{session}/events", json=late)
                assert written.json()["added"] == 0
            # Without a mark: events older than the erasure are dropped, newer ones kept.
            unmarked = {"app_name": APP, "user_id": "alice", "events": [_dump(before[0])]}
            assert (await client.post("/v1/sessions/s3/events", json=unmarked)).json()["added"] == 0
            fresh = old.create_event("user_message", "A new conversation.")
            seen = (await client.get("/v1/erasures")).headers["kora-erasures"]
            new = {"app_name": APP, "user_id": "alice", "events": [_dump(fresh)], "erasures_seen": seen}
            assert (await client.post("/v1/sessions/s4/events", json=new)).json()["added"] == 1
            # Bob's writes are never touched.
            bobs = {"app_name": APP, "user_id": "bob", "events": [_dump(before[0])], "erasures_seen": mark}
            assert (await client.post("/v1/sessions/s5/events", json=bobs)).json()["added"] == 1
        await old.close()
    assert SECRET in _everything_in_postgres(memory_db)  # bob's copy
    with psycopg.connect(memory_db) as conn:
        owners = conn.execute("SELECT session_id, user_id FROM sessions ORDER BY session_id").fetchall()
    assert owners == [("s4", "alice"), ("s5", "bob")]


def _dump(event: Any) -> dict[str, Any]:
    return dict(event.model_dump(mode="json"))


async def test_with_jwt_users_the_operator_token_is_checked_first_and_users_see_and_erase_only_theirs(
    model: ScriptedModelServer,
) -> None:
    async with identity_provider() as idp, running_agent(model, APP, **idp.agent_env()) as agent:

        def as_user(user: str) -> dict[str, str]:
            return {"Authorization": f"Bearer {idp.keys.token(user)}"}

        for user, text in (("alice", SECRET), ("bob", BOBS)):
            response = httpx.post(
                f"{agent.url}/v1/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": text}]},
                headers=as_user(user),
                timeout=60,
            )
            assert response.status_code == 200, response.text
        # The operator's token is no JWT: it is recognised before any verification would refuse it.
        listed = httpx.get(f"{agent.url}/memory/sessions", headers=OPERATOR, timeout=30).json()
        assert {s["user_id"] for s in listed["sessions"]} == {"alice", "bob"}
        mine = httpx.get(f"{agent.url}/memory/events", headers=as_user("bob"), timeout=30).text
        assert BOBS in mine
        assert SECRET not in mine
        forged = {"Authorization": f"Bearer {idp.keys.token('alice', key=new_key())}"}
        assert httpx.get(f"{agent.url}/memory/sessions", headers=forged, timeout=30).status_code == 401
        assert httpx.delete(f"{agent.url}/memory/users/alice", headers=as_user("bob"), timeout=30).status_code == 403
        erased = httpx.delete(f"{agent.url}/memory/users/alice", headers=as_user("alice"), timeout=30)
        assert erased.json() == {"removed": {"sessions": 1, "events": 2, "facts": 0}}
        assert SECRET not in _held_by(agent)


async def test_a_malformed_erasure_mark_is_refused_and_stores_nothing(memory_db: str) -> None:
    async with memory_service(service_env(memory_db)) as url:
        event = {"event_type": "user_message", "content": "hi"}
        async with httpx.AsyncClient(base_url=url, headers=AGENT, timeout=30) as client:
            for mark in ("garbage", "abc:", ":12", "abc:-1", "x" * 200):
                body = {"app_name": APP, "user_id": "alice", "events": [event], "erasures_seen": mark}
                response = await client.post("/v1/sessions/s1/events", json=body)
                assert response.status_code == 400, (mark, response.text)
                assert "erasures_seen" in response.json()["error"]["message"]
            assert (await client.get("/v1/sessions", params={"app_name": APP})).json()["sessions"] == []


@pytest.fixture(scope="module")
def guarded_agent() -> Iterator[tuple[httpx.Client, str]]:
    """An agent (LocalMemory, users by trusted header) holding one session of alice; its client and that id."""
    with ScriptedModelServer() as model, agent_client(model, APP, AUTH_TRUSTED_USER_HEADER=USER) as client:
        body = {"model": "m", "messages": [{"role": "user", "content": f"My secret is {SECRET}."}]}
        first = client.post("/v1/chat/completions", json=body, headers={USER: "alice"})
        assert first.status_code == 200, first.text
        yield client, first.headers["x-session-id"]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    who=st.sampled_from(["anonymous", "bob", "forged"]),
    target=st.text(min_size=1, max_size=300),
    kind=st.sampled_from(["users", "sessions"]),
)
def test_fuzz_nobody_but_alice_or_the_operator_erases_or_reads_alice(
    guarded_agent: tuple[httpx.Client, str], who: str, target: str, kind: str
) -> None:
    client, session = guarded_agent
    headers = {"anonymous": {}, "bob": {USER: "bob"}, "forged": {"Authorization": "Bearer not-the-operator"}}[who]
    for path in (f"/memory/{kind}/{quote(target, safe='')}", "/memory/users/alice", f"/memory/sessions/{session}"):
        response = client.delete(path, headers=headers)
        # Refused, or no such route (an id that decodes to "/" is redirected to /memory/sessions, which erases
        # nothing either way); never a 2xx, never a 500.
        assert response.status_code in {307, 400, 401, 403, 404, 405}, (path, response.status_code, response.text)
    for params in ({}, {"session_id": session}, {"session_id": target}):
        response = client.get("/memory/events", params=params, headers=headers)
        assert response.status_code in {200, 400, 401, 403}, response.text
        assert SECRET not in response.text
    # Alice's session is untouched.
    kept = client.get("/memory/events", params={"session_id": session}, headers=OPERATOR).json()["events"]
    assert SECRET in json.dumps(kept)
