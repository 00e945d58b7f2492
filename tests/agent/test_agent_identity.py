"""Verified user identities on the agent server: bearer JWTs checked against a key set served over HTTP, a
trusted gateway's header, and the user reaching the memory session, A2A task ownership and delegated peers."""

from __future__ import annotations

from collections.abc import Mapping

import httpx
import openai
import pytest

from kora.agent import identity as identity_module
from kora.scripted import TextReply, ToolCall, ToolCallReply
from tests.support.a2a import legacy_params, message_params, rpc_body
from tests.support.agent import RunningAgent, running_agent
from tests.support.identity import AUDIENCE, ISSUER, IdentityProvider, identity_provider, new_key
from tests.support.threaded import ThreadedServer

pytestmark = pytest.mark.integration

HEADER = "X-Forwarded-User"


@pytest.fixture
async def idp():
    async with identity_provider() as provider:
        yield provider


def client(agent: RunningAgent, token: str) -> openai.OpenAI:
    """An OpenAI client whose API key is the user's token: it sends ``Authorization: Bearer <token>``."""
    return openai.OpenAI(base_url=f"{agent.url}/v1", api_key=token, max_retries=0)


def ask(agent: RunningAgent, headers: Mapping[str, str | bytes], session: str, text: str = "hi") -> httpx.Response:
    body = {"model": "a", "messages": [{"role": "user", "content": text}]}
    return httpx.post(
        f"{agent.url}/v1/chat/completions", json=body, headers=headers | {"X-Session-ID": session}, timeout=10
    )


def send_task(
    agent: RunningAgent, headers: Mapping[str, str | bytes], context_id: str, text: str = "hi"
) -> httpx.Response:
    body = rpc_body("message/send", message_params(text, context_id=context_id), id_=7)
    return httpx.post(f"{agent.url}/", json=body, headers=headers, timeout=10)


def session_users(agent: RunningAgent) -> dict[str, str]:
    sessions = agent.get("/memory/sessions").json()["sessions"]
    return {session["session_id"]: session["user_id"] for session in sessions}


# -- bearer tokens ---------------------------------------------------------------------------------------------


async def test_a_valid_token_makes_its_subject_the_user_of_the_chat_session_and_of_the_a2a_task(model, idp):
    async with running_agent(model, **idp.agent_env()) as agent:
        token = idp.keys.token("alice")
        answer = client(agent, token).chat.completions.create(
            model="a", messages=[{"role": "user", "content": "hello"}], extra_headers={"X-Session-ID": "chat-1"}
        )
        assert answer.choices[0].message.content == "You said: hello"
        task = send_task(agent, {"Authorization": f"Bearer {idp.keys.token('bob')}"}, "ctx-1")
        assert task.status_code == 200
        assert task.json()["result"]["status"]["state"] == "completed"
        assert session_users(agent) == {"chat-1": "alice", "ctx-1": "bob"}
        # Many requests with known keys fetch the key set once.
        for _ in range(3):
            assert ask(agent, {"Authorization": f"Bearer {token}"}, "chat-1").status_code == 200
        assert idp.keys.fetches == 1


async def test_the_user_claim_can_be_another_claim(model, idp):
    async with running_agent(model, **idp.agent_env(AUTH_JWT_USER_CLAIM="email")) as agent:
        token = idp.keys.token("opaque-id", email="carol@example.com")
        assert ask(agent, {"Authorization": f"Bearer {token}"}, "s").status_code == 200
        missing = ask(agent, {"Authorization": f"Bearer {idp.keys.token('opaque-id')}"}, "t")
        assert missing.status_code == 401
        assert "'email' claim is missing" in missing.json()["error"]["message"]
        assert session_users(agent) == {"s": "carol@example.com"}


def _bad_tokens(idp: IdentityProvider) -> dict[str, str]:
    keys = idp.keys
    return {
        "expired": keys.token(expires_in=-3600),
        "wrong audience": keys.token(aud="someone-else"),
        "no audience": keys.token(aud=None),
        "wrong issuer": keys.token(iss="https://evil.test"),
        "bad signature": keys.token(key=new_key()),  # names k1, signed by another key
        "unknown key id": keys.token(kid="nobody", key=new_key()),
        "no expiry": keys.token(exp=None),
        "no subject": keys.token(sub=None),
        "control characters in the subject": keys.token("ali\nce"),
        "garbage": "not-a-jwt",
        "three dots": "a.b.c",
        # An HMAC token "signed" with the public key: the classic algorithm confusion.
        "hs256 with the public key": _hs256_with_public_key(idp),
    }


def _hs256_with_public_key(idp: IdentityProvider) -> str:
    import base64
    import hashlib
    import hmac
    import json

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    header = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "k1"}).encode())
    claims = {"sub": "mallory", "iss": ISSUER, "aud": AUDIENCE, "exp": 4102444800}
    payload = b64(json.dumps(claims).encode())
    secret = json.dumps(idp.keys.jwks()["keys"][0]).encode()
    signature = hmac.new(secret, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    return f"{header}.{payload}.{b64(signature)}"


async def test_a_token_that_fails_answers_401_in_each_protocols_error_format_and_runs_no_turn(model, idp):
    async with running_agent(model, **idp.agent_env()) as agent:
        for reason, token in _bad_tokens(idp).items():
            with pytest.raises(openai.AuthenticationError) as caught:
                client(agent, token).chat.completions.create(model="a", messages=[{"role": "user", "content": "x"}])
            assert caught.value.status_code == 401, reason
            assert caught.value.response.headers["www-authenticate"] == 'Bearer error="invalid_token"'
            body = caught.value.response.json()
            assert body["error"]["type"] == "invalid_request_error", reason
            assert body["error"]["code"] == "invalid_token", reason

            rpc = send_task(agent, {"Authorization": f"Bearer {token}"}, "ctx")
            assert rpc.status_code == 401, reason
            answer = rpc.json()
            assert answer["jsonrpc"] == "2.0"
            assert answer["id"] == 7, reason
            assert answer["error"]["code"] == -32000
            assert answer["error"]["data"] == {"type": "invalid_token"}
        assert model.requests == []
        assert session_users(agent) == {}


async def test_a_request_without_a_token_or_with_another_scheme_is_anonymous(model, idp):
    async with running_agent(model, **idp.agent_env()) as agent:
        assert ask(agent, {}, "nobody").status_code == 200
        assert ask(agent, {"Authorization": "Basic YWxpY2U6c2VjcmV0"}, "basic").status_code == 200
        assert send_task(agent, {}, "anon-task").json()["result"]["status"]["state"] == "completed"
        # Without AUTH_TRUSTED_USER_HEADER the gateway's header is just another header.
        assert ask(agent, {HEADER: "mallory"}, "forged").status_code == 200
        assert set(session_users(agent).values()) == {"default"}
        assert idp.keys.fetches == 0  # nothing to verify, nothing fetched


async def test_an_empty_or_repeated_authorization_header_is_refused(model, idp):
    async with running_agent(model, **idp.agent_env()) as agent:
        assert ask(agent, {"Authorization": "Bearer"}, "s").status_code == 401
        token = idp.keys.token()
        repeated = httpx.post(
            f"{agent.url}/v1/chat/completions",
            json={"model": "a", "messages": [{"role": "user", "content": "x"}]},
            headers=[("Authorization", f"Bearer {token}"), ("Authorization", "Bearer other")],
            timeout=10,
        )
        assert repeated.status_code == 401


async def test_a_rotated_key_is_fetched_when_a_token_names_it(model, idp, monkeypatch):
    monkeypatch.setattr(identity_module, "UNKNOWN_KEY_REFETCH_SECONDS", 0.0)
    async with running_agent(model, **idp.agent_env()) as agent:
        assert ask(agent, {"Authorization": f"Bearer {idp.keys.token('alice')}"}, "a").status_code == 200
        idp.keys.add("k2")
        rotated = idp.keys.token("dave", kid="k2")
        assert ask(agent, {"Authorization": f"Bearer {rotated}"}, "d").status_code == 200
        assert idp.keys.fetches == 2
        assert session_users(agent)["d"] == "dave"


async def test_tokens_naming_made_up_keys_do_not_refetch_the_key_set_each_time(model, idp):
    async with running_agent(model, **idp.agent_env()) as agent:
        for index in range(5):
            token = idp.keys.token(kid=f"made-up-{index}", key=new_key())
            assert ask(agent, {"Authorization": f"Bearer {token}"}, "x").status_code == 401
        assert idp.keys.fetches == 1


async def test_a_key_server_that_is_down_answers_503_not_500(model, idp):
    idp.keys.failing = True
    async with running_agent(model, **idp.agent_env()) as agent:
        token = idp.keys.token()
        with pytest.raises(openai.APIStatusError) as caught:
            client(agent, token).chat.completions.create(model="a", messages=[{"role": "user", "content": "x"}])
        assert caught.value.status_code == 503
        assert caught.value.response.json()["error"]["code"] == "keys_unavailable"
        rpc = send_task(agent, {"Authorization": f"Bearer {token}"}, "ctx")
        assert rpc.status_code == 503
        assert rpc.json()["error"]["code"] == -32603
        # Back up: the next request fetches again and gets through.
        idp.keys.failing = False
        assert ask(agent, {"Authorization": f"Bearer {token}"}, "after").status_code == 200


# -- the trusted gateway header --------------------------------------------------------------------------------


async def test_the_trusted_header_names_the_user_when_configured(model):
    async with running_agent(model, AUTH_TRUSTED_USER_HEADER=HEADER) as agent:
        assert ask(agent, {HEADER: "erin@example.com"}, "chat").status_code == 200
        assert send_task(agent, {HEADER.lower(): "frank"}, "task").status_code == 200
        assert ask(agent, {}, "anon").status_code == 200
        assert session_users(agent) == {"chat": "erin@example.com", "task": "frank", "anon": "default"}


@pytest.mark.parametrize(
    "value",
    [b"ali\tce", b"caf\xc3\xa9", b"\xff", b"x" * 257, b""],
    ids=["tab", "utf-8", "latin-1", "too long", "empty"],
)
async def test_a_trusted_header_that_is_not_a_user_id_answers_400(model, value):
    async with running_agent(model, AUTH_TRUSTED_USER_HEADER=HEADER) as agent:
        chat = ask(agent, {HEADER: value}, "s")
        assert chat.status_code == 400
        assert chat.json()["error"]["code"] == "invalid_user"
        assert HEADER in chat.json()["error"]["message"]
        rpc = send_task(agent, {HEADER: value}, "t")
        assert rpc.status_code == 400
        assert rpc.json()["error"]["code"] == -32602
        assert session_users(agent) == {}


async def test_a_repeated_trusted_header_answers_400(model):
    async with running_agent(model, AUTH_TRUSTED_USER_HEADER=HEADER) as agent:
        body = {"model": "a", "messages": [{"role": "user", "content": "x"}]}
        response = httpx.post(
            f"{agent.url}/v1/chat/completions", json=body, headers=[(HEADER, "alice"), (HEADER, "root")], timeout=10
        )
        assert response.status_code == 400


async def test_a_token_wins_over_the_trusted_header(model, idp):
    async with running_agent(model, **idp.agent_env(AUTH_TRUSTED_USER_HEADER=HEADER)) as agent:
        headers = {"Authorization": f"Bearer {idp.keys.token('alice')}", HEADER: "mallory"}
        assert ask(agent, headers, "s").status_code == 200
        assert ask(agent, {HEADER: "gina"}, "g").status_code == 200
        assert session_users(agent) == {"s": "alice", "g": "gina"}


# -- A2A task ownership ----------------------------------------------------------------------------------------


async def test_a_users_a2a_tasks_are_hidden_from_other_users(model):
    async with running_agent(model, AUTH_TRUSTED_USER_HEADER=HEADER) as agent:
        async with httpx.AsyncClient(base_url=agent.url, timeout=10) as http:
            sent = await http.post(
                "/", json=rpc_body("tasks/send", legacy_params("mine", task_id="t-alice")), headers={HEADER: "alice"}
            )
            assert sent.json()["result"]["id"] == "t-alice"
            for who in ({HEADER: "bob"}, {}):
                other = await http.post("/", json=rpc_body("tasks/get", {"id": "t-alice"}), headers=who)
                assert other.json()["error"]["code"] == -32001
                # Nor can another user start a task under that id.
                taken = await http.post(
                    "/", json=rpc_body("tasks/send", legacy_params("x", task_id="t-alice")), headers=who
                )
                assert taken.json()["error"]["code"] == -32602
            own = await http.post("/", json=rpc_body("tasks/get", {"id": "t-alice"}), headers={HEADER: "alice"})
            assert own.json()["result"]["id"] == "t-alice"


# -- delegation ------------------------------------------------------------------------------------------------


async def test_delegation_forwards_the_users_token_and_the_peer_verifies_it(model, idp):
    model.enqueue(
        ToolCallReply([ToolCall("delegate_to_child", {"task": "count"})]),
        TextReply("one two"),
        TextReply("The child counted."),
    )
    async with running_agent(model, name="child", **idp.agent_env()) as child:
        env = idp.agent_env(AGENT_SUB_AGENTS=f"child:{child.url}")
        async with running_agent(model, name="parent", **env) as parent:
            answer = client(parent, idp.keys.token("alice")).chat.completions.create(
                model="a", messages=[{"role": "user", "content": "ask"}], extra_headers={"X-Session-ID": "p"}
            )
            assert answer.choices[0].message.content == "The child counted."
            assert session_users(child) == {"p.parent": "alice"}
            received = child.events("p.parent")[0]
            assert received["event_type"] == "task_delegation_received"
            assert received["metadata"]["from_agent"] == "parent"


async def test_delegation_forwards_the_trusted_header_and_anonymous_turns_forward_nothing(model):
    model.enqueue(
        ToolCallReply([ToolCall("delegate_to_child", {"task": "first"})]),
        TextReply("done 1"),
        TextReply("ok 1"),
        ToolCallReply([ToolCall("delegate_to_child", {"task": "second"})]),
        TextReply("done 2"),
        TextReply("ok 2"),
    )
    async with running_agent(model, name="child", AUTH_TRUSTED_USER_HEADER=HEADER) as child:
        env = {"AUTH_TRUSTED_USER_HEADER": HEADER, "AGENT_SUB_AGENTS": f"child:{child.url}"}
        async with running_agent(model, name="parent", **env) as parent:
            assert ask(parent, {HEADER: "hana"}, "known").status_code == 200
            assert ask(parent, {}, "anon").status_code == 200
            assert session_users(child) == {"known.parent": "hana", "anon.parent": "default"}


async def test_a_chat_only_peer_receives_the_credential_as_a_header(model, idp):
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    seen: list[dict[str, str]] = []

    async def chat(request: Request) -> JSONResponse:
        seen.append(dict(request.headers))
        message = {"role": "assistant", "content": "chat-only answer"}
        return JSONResponse({"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": message}]})

    model.enqueue(ToolCallReply([ToolCall("delegate_to_old", {"task": "hi old"})]), TextReply("done"))
    token = idp.keys.token("ivan")
    async with ThreadedServer(Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])) as old:
        env = idp.agent_env(AGENT_SUB_AGENTS=f"old:{old.root_url}")
        async with running_agent(model, name="parent", **env) as parent:
            client(parent, token).chat.completions.create(model="a", messages=[{"role": "user", "content": "go"}])
            (headers,) = seen
            assert headers["authorization"] == f"Bearer {token}"
            assert headers["x-kora-delegated-by"] == "parent"
