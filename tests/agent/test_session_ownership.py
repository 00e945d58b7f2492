"""A session belongs to the verified user who started it (docs/identity.md, "Who a session belongs to").

Real agents on 127.0.0.1 (scripted model), real clients (``openai``, the a2a-sdk client, raw JSON-RPC), and the
memory service on a real Postgres: another verified user, or an anonymous request, naming a user's session is
refused (403 ``session_forbidden`` on ``/v1``, a JSON-RPC error on A2A, 403 from the memory service) before any
model call, reading nothing of the session and storing nothing in it; its owner goes on as before; an anonymous
session stays open to every caller; an agent without identities behaves exactly as before.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import httpx
import openai
import pytest
from a2a.utils.errors import InvalidParamsError
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from kora.core.events import MemoryEvent
from kora.scripted import TextReply
from tests.support.a2a import legacy_params, message_params, rpc_body, sdk_client, user_message
from tests.support.agent import OPERATOR, RunningAgent, agent_client, running_agent
from tests.support.eventually import eventually
from tests.support.identity import identity_provider
from tests.support.memory import ADMIN, memory_service, service_env
from tests.support.scripted_server import ScriptedModelServer

pytestmark = pytest.mark.integration

HEADER = "X-Forwarded-User"
SECRET = "my locker code is 4711"
APP = "assistant"


def chat_client(agent: RunningAgent, user: str | None, api_key: str = "k") -> openai.OpenAI:
    """An OpenAI client acting for ``user`` through the trusted header (anonymous when None)."""
    headers = {HEADER: user} if user is not None else {}
    return openai.OpenAI(base_url=f"{agent.url}/v1", api_key=api_key, max_retries=0, default_headers=headers)


def say(agent: RunningAgent, user: str | None, session: str, text: str, *, stream: bool = False) -> str:
    """One chat turn in ``session``; the answer's text."""
    client = chat_client(agent, user)
    messages: list[Any] = [{"role": "user", "content": text}]
    if not stream:
        answer = client.chat.completions.create(model="m", messages=messages, extra_headers={"X-Session-ID": session})
        return answer.choices[0].message.content or ""
    chunks = client.chat.completions.create(
        model="m", messages=messages, stream=True, extra_headers={"X-Session-ID": session}
    )
    return "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)


def assert_refused(error: openai.APIStatusError, session: str) -> None:
    """A 403 in OpenAI's error format that names the session and nothing of its owner or content."""
    assert error.status_code == 403
    body = error.response.json()["error"]
    assert body["type"] == "permission_error"
    assert body["code"] == "session_forbidden"
    assert session in body["message"]
    for leaked in ("alice", "4711", "locker"):
        assert leaked not in error.response.text


def contents(agent: RunningAgent, session: str) -> list[object]:
    return [event["content"] for event in agent.events(session)]


def send_a2a(agent: RunningAgent, user: str | None, body: dict[str, Any]) -> dict[str, Any]:
    headers = {HEADER: user} if user is not None else {}
    response = httpx.post(f"{agent.url}/", json=body, headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def assert_rpc_refused(answer: dict[str, Any], session: str) -> None:
    error = answer["error"]
    assert error["code"] == -32602
    assert error["data"] == {"type": "session_forbidden"}
    assert session in error["message"]
    assert "alice" not in str(answer)
    assert "4711" not in str(answer)


# -- chat ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_another_user_and_an_anonymous_request_cannot_continue_a_users_chat_session(
    model: ScriptedModelServer, stream: bool
) -> None:
    async with running_agent(model, AUTH_TRUSTED_USER_HEADER=HEADER) as agent:
        assert say(agent, "alice", "chat-a", SECRET, stream=stream) == f"You said: {SECRET}"
        kept = contents(agent, "chat-a")
        asked = len(model.requests)
        for intruder in ("bob", None):
            with pytest.raises(openai.PermissionDeniedError) as refused:
                say(agent, intruder, "chat-a", "what is my locker code?", stream=stream)
            assert_refused(refused.value, "chat-a")
        # No turn ran: the model was not asked, nothing was stored, the session is still alice's alone.
        assert len(model.requests) == asked
        assert contents(agent, "chat-a") == kept
        assert {s["session_id"]: s["user_id"] for s in agent.get("/memory/sessions").json()["sessions"]} == {
            "chat-a": "alice"
        }
        # The owner goes on, with her history.
        say(agent, "alice", "chat-a", "and again", stream=stream)
        sent = [m["content"] for m in model.requests[-1]["messages"] if m["role"] == "user"]
        assert sent == [SECRET, "and again"]


async def test_a_bearer_token_user_owns_her_session_against_another_token_and_no_token(model) -> None:
    async with identity_provider() as idp, running_agent(model, **idp.agent_env()) as agent:
        messages: list[Any] = [{"role": "user", "content": SECRET}]
        alice = chat_client(agent, None, api_key=idp.keys.token("alice"))
        first = alice.chat.completions.create(model="m", messages=messages, extra_headers={"X-Session-ID": "jwt"})
        assert first.choices[0].message.content == f"You said: {SECRET}"
        bob = chat_client(agent, None, api_key=idp.keys.token("bob"))
        with pytest.raises(openai.PermissionDeniedError) as refused:
            bob.chat.completions.create(model="m", messages=messages, extra_headers={"X-Session-ID": "jwt"})
        assert_refused(refused.value, "jwt")
        body = {"model": "m", "messages": messages}
        anonymous = httpx.post(f"{agent.url}/v1/chat/completions", json=body, headers={"X-Session-ID": "jwt"})
        assert_refused(openai.PermissionDeniedError("refused", response=anonymous, body=None), "jwt")
        assert len(contents(agent, "jwt")) == 2


async def test_an_anonymous_session_stays_open_to_anonymous_and_verified_callers_and_is_not_claimed(model) -> None:
    async with running_agent(model, AUTH_TRUSTED_USER_HEADER=HEADER) as agent:
        say(agent, None, "open-chat", "first")
        say(agent, "bob", "open-chat", "second")
        say(agent, None, "open-chat", "third", stream=True)
        assert contents(agent, "open-chat") == [
            "first",
            "You said: first",
            "second",
            "You said: second",
            "third",
            "You said: third",
        ]
        (session,) = agent.get("/memory/sessions").json()["sessions"]
        assert session["user_id"] == "default"


async def test_without_identities_configured_every_request_continues_any_session_as_before(model) -> None:
    async with running_agent(model) as agent:
        say(agent, "alice", "shared", "one")  # the header means nothing to this agent
        say(agent, "bob", "shared", "two", stream=True)
        say(agent, None, "shared", "three")
        assert len(contents(agent, "shared")) == 6
        assert send_a2a(agent, "carol", rpc_body("message/send", message_params("four", "shared")))["result"]
        assert len(contents(agent, "shared")) == 8


# -- A2A ---------------------------------------------------------------------------------------------------------


async def test_a2a_refuses_a_context_of_another_user_before_making_a_task(model) -> None:
    async with running_agent(model, AUTH_TRUSTED_USER_HEADER=HEADER) as agent:
        owned = send_a2a(agent, "alice", rpc_body("message/send", message_params(SECRET, "ctx-a")))
        assert owned["result"]["status"]["state"] == "completed"
        kept = contents(agent, "ctx-a")
        asked = len(model.requests)
        for intruder in ("bob", None):
            for body in (
                rpc_body("message/send", message_params("code?", "ctx-a")),
                rpc_body("message/send", message_params("code?", "ctx-a", blocking=False)),
                rpc_body("tasks/send", legacy_params("code?", session_id="ctx-a", task_id=f"t-{intruder}")),
                rpc_body("SendMessage", {"message": {**message_params("code?", "ctx-a")["message"], "role": 1}}),
            ):
                assert_rpc_refused(send_a2a(agent, intruder, body), "ctx-a")
            # Nor in a batch, where each entry answers on its own.
            batch = [rpc_body("message/send", message_params("code?", "ctx-a"), id_=1), rpc_body("x", id_=2)]
            headers = {HEADER: intruder} if intruder else {}
            answers = httpx.post(f"{agent.url}/", json=batch, headers=headers, timeout=30).json()
            assert_rpc_refused(answers[0], "ctx-a")
        # The refused tasks were never made: their ids are free and unknown.
        missing = send_a2a(agent, "bob", rpc_body("tasks/get", {"id": "t-bob"}))
        assert missing["error"]["code"] == -32001
        assert len(model.requests) == asked
        assert contents(agent, "ctx-a") == kept
        again = send_a2a(agent, "alice", rpc_body("message/send", message_params("again", "ctx-a")))
        assert again["result"]["status"]["state"] == "completed"


async def test_the_a2a_sdk_client_of_another_user_gets_an_error_not_a_task(model) -> None:
    async with running_agent(model, AUTH_TRUSTED_USER_HEADER=HEADER) as agent:
        async with httpx.AsyncClient(timeout=30, headers={HEADER: "alice"}) as alice_http:
            alice = await sdk_client(agent.url, http=alice_http)
            (done,) = [r async for r in alice.send_message(user_message(SECRET, context_id="sdk-ctx"))]
            assert done.task.artifacts[0].parts[0].text == f"You said: {SECRET}"
        for streaming in (False, True):
            async with httpx.AsyncClient(timeout=30, headers={HEADER: "bob"}) as bob_http:
                bob = await sdk_client(agent.url, http=bob_http, streaming=streaming)
                with pytest.raises(InvalidParamsError) as refused:
                    _ = [r async for r in bob.send_message(user_message("code?", context_id="sdk-ctx"))]
                assert "'sdk-ctx' belongs to another user" in str(refused.value)
                assert "4711" not in str(refused.value)
                assert "alice" not in str(refused.value)
        assert len(contents(agent, "sdk-ctx")) == 2


# -- RemoteMemory and the memory service ----------------------------------------------------------------------------


@pytest.mark.parametrize("failure_mode", ["soft", "strict"])
async def test_an_agent_that_never_saw_the_session_is_refused_by_the_store_and_says_403(
    memory_db: str, model: ScriptedModelServer, failure_mode: str
) -> None:
    env = {"AUTH_TRUSTED_USER_HEADER": HEADER, "MEMORY_FAILURE_MODE": failure_mode}
    async with memory_service(service_env(memory_db)) as store:
        async with running_agent(model, APP, MEMORY_STORE_ENDPOINT=store, **env) as first:
            say(first, "alice", "remote-chat", SECRET)
            eventually(lambda: len(contents(first, "remote-chat")) == 2, "turn in the store", within=30)
            # On the agent that served her, its local window refuses at once.
            with pytest.raises(openai.PermissionDeniedError) as local:
                say(first, "bob", "remote-chat", "code?")
            assert_refused(local.value, "remote-chat")
        # Another replica (or the same after a restart) knows nothing of the session: it learns the owner from the
        # store before answering, so even a streamed answer is refused with a 403, before its status line.
        for intruder in ("bob", None):
            async with running_agent(model, APP, MEMORY_STORE_ENDPOINT=store, **env) as fresh:
                with pytest.raises(openai.PermissionDeniedError) as streamed:
                    say(fresh, intruder, "remote-chat", "code?", stream=True)
                assert_refused(streamed.value, "remote-chat")
        async with running_agent(model, APP, MEMORY_STORE_ENDPOINT=store, **env) as second:
            asked = len(model.requests)
            # A2A first, on a replica that never saw the session: the turn learns the owner and the task fails.
            a2a = send_a2a(second, "bob", rpc_body("message/send", message_params("code?", "remote-chat")))
            assert a2a["result"]["status"]["state"] == "failed"
            assert "4711" not in str(a2a)
            for intruder in ("bob", None):
                with pytest.raises(openai.PermissionDeniedError) as refused:
                    say(second, intruder, "remote-chat", "code?")
                assert_refused(refused.value, "remote-chat")
                with pytest.raises(openai.PermissionDeniedError) as streamed:
                    say(second, intruder, "remote-chat", "code?", stream=True)
                assert_refused(streamed.value, "remote-chat")
                # Now that the replica knows the owner, A2A refuses before any task exists.
                a2a = send_a2a(second, intruder, rpc_body("message/send", message_params("code?", "remote-chat")))
                assert a2a["error"]["data"]["type"] == "session_forbidden"
                assert "4711" not in str(a2a)
            assert len(model.requests) == asked
            # A refusal is not an outage: the agent stays ready, not degraded, and nothing reached the session.
            ready = second.get("/ready")
            assert ready.status_code == 200
            assert "memory" not in ready.json().get("details", {})
            assert contents(second, "remote-chat") == [SECRET, f"You said: {SECRET}"]
            # Its owner goes on through this replica, with her history from the store.
            say(second, "alice", "remote-chat", "and again")
            sent = [m["content"] for m in model.requests[-1]["messages"] if m["role"] == "user"]
            assert sent == [SECRET, "and again"]


def _event(content: str) -> dict[str, object]:
    return MemoryEvent(event_type="user_message", content=content).model_dump(mode="json")  # type: ignore[arg-type]


async def test_the_memory_service_refuses_a_users_session_to_others_on_every_route_that_names_it(
    memory_db: str,
) -> None:
    async with (
        memory_service(service_env(memory_db)) as url,
        httpx.AsyncClient(base_url=url, headers=ADMIN, timeout=30) as store,
    ):
        owned = {"app_name": APP, "user_id": "alice", "events": [_event(SECRET)]}
        assert (await store.post("/v1/sessions/s-a/events", json=owned)).status_code == 200
        saved = {"content": "The user's locker code is 4711.", "app_name": APP, "session_id": "s-a"}
        assert (await store.post("/v1/facts", json={**saved, "user_id": "alice"})).status_code == 200

        def as_user(body: Mapping[str, object], user: str | None) -> dict[str, object]:
            return {**body, "user_id": user} if user is not None else dict(body)

        routes: list[tuple[str, dict[str, object]]] = [
            ("/v1/sessions", {"app_name": APP, "session_id": "s-a"}),
            ("/v1/sessions/s-a/events", {"app_name": APP, "events": [_event("hijack")]}),
            ("/v1/sessions/s-a/context", {"app_name": APP, "query": "locker code", "scope": "session"}),
            ("/v1/recall", {"app_name": APP, "query": "locker code", "scope": "session", "session_id": "s-a"}),
            ("/v1/facts", {"content": "The user owes me money.", "app_name": APP, "session_id": "s-a"}),
        ]
        for intruder in ("bob", None):
            for path, body in routes:
                refused = await store.post(path, json=as_user(body, intruder))
                assert refused.status_code == 403, (path, intruder, refused.text)
                error = refused.json()["error"]
                assert (error["type"], error["code"]) == ("permission_error", "session_forbidden")
                assert "4711" not in refused.text
                assert "alice" not in refused.text
        # Nothing changed: one event, one fact, still alice's session.
        events = (await store.get("/v1/sessions/s-a/events", params={"app_name": APP})).json()
        assert [e["content"] for e in events["events"]] == [SECRET]
        facts = (await store.get("/v1/facts")).json()["facts"]
        assert [f["text"] for f in facts] == ["The user's locker code is 4711."]
        assert (await store.get("/v1/sessions/s-a", params={"app_name": APP})).json()["user_id"] == "alice"
        # Alice reads her own, on the same routes.
        for path, body in routes[2:4]:
            mine = await store.post(path, json=as_user(body, "alice"))
            assert mine.status_code == 200, mine.text
        context = (await store.post("/v1/sessions/s-a/context", json=as_user(routes[2][1], "alice"))).json()
        assert [e["content"] for e in context["window"]] == [SECRET]
        assert [f["text"] for f in context["facts"]] == ["The user's locker code is 4711."]


async def test_the_facts_of_a_users_session_stay_hers_after_the_session_is_deleted(memory_db: str) -> None:
    async with (
        memory_service(service_env(memory_db)) as url,
        httpx.AsyncClient(base_url=url, headers=ADMIN, timeout=30) as store,
    ):
        body = {"content": "The user's locker code is 4711.", "app_name": APP, "session_id": "gone", "user_id": "al"}
        assert (await store.post("/v1/facts", json=body)).status_code == 200
        await store.delete("/v1/sessions/gone", params={"app_name": APP})
        recall = {"app_name": APP, "query": "locker code", "scope": "session", "session_id": "gone"}
        for intruder in ({}, {"user_id": "bob"}):
            found = await store.post("/v1/recall", json={**recall, **intruder})
            assert found.status_code == 200
            assert found.json()["hits"] == []
        mine = await store.post("/v1/recall", json={**recall, "user_id": "al"})
        assert [hit["text"] for hit in mine.json()["hits"]] == ["The user's locker code is 4711."]


async def test_the_memory_service_keeps_an_anonymous_session_open_and_unclaimed(memory_db: str) -> None:
    async with (
        memory_service(service_env(memory_db)) as url,
        httpx.AsyncClient(base_url=url, headers=ADMIN, timeout=30) as store,
    ):
        for user in (None, "bob", None, "carol"):
            body: dict[str, object] = {"app_name": APP, "events": [_event(f"from {user}")]}
            if user is not None:
                body["user_id"] = user
            assert (await store.post("/v1/sessions/s-open/events", json=body)).status_code == 200
        session = (await store.get("/v1/sessions/s-open", params={"app_name": APP})).json()
        assert (session["user_id"], session["event_count"]) == (None, 4)


# -- hostile users and session ids ------------------------------------------------------------------------------------

OWNED = "owned-session"


@pytest.fixture(scope="module")
def guarded() -> Iterator[tuple[httpx.Client, ScriptedModelServer, list[dict[str, Any]]]]:
    """An agent that trusts the user header, with a session of alice's holding her secret."""
    with ScriptedModelServer() as model, agent_client(model, "guarded", AUTH_TRUSTED_USER_HEADER=HEADER) as client:
        model.enqueue(TextReply("noted"))
        first = client.post(
            "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": SECRET}]},
            headers={"X-Session-ID": OWNED, HEADER: "alice"},
        )
        assert first.status_code == 200, first.text
        yield (
            client,
            model,
            client.get("/memory/events", params={"session_id": OWNED}, headers=OPERATOR).json()["events"],
        )


header_users = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"), max_size=40)
session_ids = st.one_of(st.just(OWNED), st.sampled_from([OWNED.upper(), f"{OWNED} ", f" {OWNED}", f"{OWNED}\t"]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    user=st.none() | st.just("alice") | header_users,
    session=session_ids | st.text(max_size=20),
    via=st.sampled_from(["chat", "stream", "a2a"]),
)
def test_fuzz_users_and_session_ids_never_reach_another_users_session(guarded, user, session, via) -> None:
    client, _, kept = guarded
    headers: dict[str, bytes] = {}
    if user is not None and user.strip(" \t"):
        headers[HEADER] = user.strip(" \t").encode("latin-1")
    before = client.get("/memory/events", params={"session_id": OWNED}, headers=OPERATOR).json()["events"]
    if via == "a2a":
        body: dict[str, Any] = rpc_body("message/send", message_params("code?", session or None))
        response = client.post("/", json=body, headers=headers)
    else:
        # Line breaks and other controls cannot be sent in a header at all (the client refuses them).
        assume(all(" " <= char != "\x7f" for char in session))
        if session.strip(" \t"):
            headers["X-Session-ID"] = session.strip(" \t").encode("latin-1", "replace")
        body = {"messages": [{"role": "user", "content": "code?"}], "stream": via == "stream"}
        response = client.post("/v1/chat/completions", json=body, headers=headers)
    refusal = response.json().get("error") if response.headers["content-type"] == "application/json" else None
    event(f"{via} {response.status_code} {refusal and (refusal.get('code'), refusal.get('data'))}")
    assert response.status_code in {200, 400, 403}, response.text[:300]
    if response.status_code == 403:
        assert refusal["code"] == "session_forbidden"
    is_alice = headers.get(HEADER) == b"alice"
    after = client.get("/memory/events", params={"session_id": OWNED}, headers=OPERATOR).json()["events"]
    assert after[: len(kept)] == kept
    if not is_alice:
        # Nothing of alice's is answered, and nothing is added to her session.
        assert "4711" not in response.text
        assert after == before
