"""The memory service's credentials (docs/identity.md, "Who can read and erase what"): the admin token reaches
everything, the bound agents' token one agent's sessions, anything else only the probes; an unset token admits
no one. Real service on a real Postgres, real HTTP clients."""

from __future__ import annotations

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kora.core.events import MemoryEvent
from kora.memory.remote import RemoteMemory
from tests.support.memory import ADMIN, ADMIN_TOKEN, AGENT, AGENT_TOKEN, memory_service, service_env

pytestmark = pytest.mark.integration

APP = "assistant"

#: (method, path, body or params): the routes that span agents or users, for the admin credential only.
ADMIN_ROUTES: list[tuple[str, str, dict[str, object]]] = [
    ("GET", "/v1/sessions", {}),
    ("GET", "/v1/events", {}),
    ("GET", "/v1/facts", {"scope": "store"}),
    ("GET", "/v1/facts", {}),  # scope defaults to store
    ("GET", "/v1/facts/fact_x/history", {}),
    ("GET", "/v1/jobs", {}),
]


def _event(content: str) -> dict[str, object]:
    return MemoryEvent(event_type="user_message", content=content).model_dump(mode="json")


#: (method, path, body or params): one agent's routes, for the agent credential (and the admin one).
AGENT_ROUTES: list[tuple[str, str, dict[str, object]]] = [
    ("POST", "/v1/sessions", {"app_name": APP, "session_id": "s1", "user_id": "alice"}),
    ("GET", "/v1/sessions", {"app_name": APP}),
    ("GET", "/v1/sessions/s1", {"app_name": APP}),
    ("PUT", "/v1/sessions/s1/metadata", {"app_name": APP, "user_id": "alice", "metadata": {"k": "v"}}),
    ("GET", "/v1/sessions/s1/metadata", {"app_name": APP}),
    ("POST", "/v1/sessions/s1/events", {"app_name": APP, "user_id": "alice", "events": [_event("hi")]}),
    ("GET", "/v1/sessions/s1/events", {"app_name": APP}),
    ("GET", "/v1/events", {"app_name": APP}),
    ("POST", "/v1/sessions/s1/context", {"app_name": APP, "user_id": "alice", "query": "hi"}),
    ("POST", "/v1/recall", {"query": "hi", "scope": "user", "app_name": APP, "user_id": "alice"}),
    ("POST", "/v1/facts", {"content": "Alice likes tea.", "app_name": APP, "user_id": "alice"}),
    ("GET", "/v1/facts", {"scope": "user", "user_id": "alice"}),
    ("GET", "/v1/erasures", {}),
    ("POST", "/v1/forget", {"session_id": "nobody-has-this"}),
    ("DELETE", "/v1/sessions/s1", {"app_name": APP}),
]


async def _call(client: httpx.AsyncClient, method: str, path: str, data: dict[str, object]) -> httpx.Response:
    if method in {"GET", "DELETE"}:
        return await client.request(method, path, params=data)  # type: ignore[arg-type]
    return await client.request(method, path, json=data)


def _assert_error(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, (response.request.url, response.text)
    assert response.json()["error"]["code"] == code
    assert {"message", "type", "code"} <= set(response.json()["error"])


@pytest.fixture
async def store(memory_db: str):
    async with memory_service(service_env(memory_db)) as url:
        yield url


async def test_only_the_probes_are_open_without_a_credential(store: str) -> None:
    async with httpx.AsyncClient(base_url=store, timeout=30) as anonymous:
        assert (await anonymous.get("/health")).status_code == 200
        assert (await anonymous.get("/ready")).status_code == 200
        for method, path, data in ADMIN_ROUTES + AGENT_ROUTES:
            response = await _call(anonymous, method, path, data)
            _assert_error(response, 401, "invalid_token")
            assert response.headers["www-authenticate"].startswith("Bearer")


async def test_an_unknown_or_malformed_credential_is_refused(store: str) -> None:
    for headers in (
        {"Authorization": "Bearer not-a-token"},
        {"Authorization": f"Bearer {AGENT_TOKEN}x"},
        {"Authorization": f"Bearer {ADMIN_TOKEN[:-1]}"},
        {"Authorization": "Bearer"},
        {"Authorization": f"Basic {ADMIN_TOKEN}"},
    ):
        async with httpx.AsyncClient(base_url=store, headers=headers, timeout=30) as client:
            for method, path, data in ADMIN_ROUTES + AGENT_ROUTES:
                _assert_error(await _call(client, method, path, data), 401, "invalid_token")


async def test_the_agent_credential_reaches_one_agents_sessions_and_nothing_across(store: str) -> None:
    async with httpx.AsyncClient(base_url=store, headers=AGENT, timeout=30) as agent:
        for method, path, data in AGENT_ROUTES:
            response = await _call(agent, method, path, data)
            assert response.status_code == 200, (method, path, response.text)
        for method, path, data in ADMIN_ROUTES:
            _assert_error(await _call(agent, method, path, data), 403, "admin_only")


async def test_the_admin_credential_reaches_everything(store: str) -> None:
    async with httpx.AsyncClient(base_url=store, headers=ADMIN, timeout=30) as admin:
        for method, path, data in AGENT_ROUTES + ADMIN_ROUTES:
            response = await _call(admin, method, path, data)
            expected = 404 if path.endswith("/history") else 200
            assert response.status_code == expected, (method, path, response.text)


async def test_a_refused_request_changes_nothing(store: str) -> None:
    async with httpx.AsyncClient(base_url=store, timeout=30) as anonymous:
        write = {"app_name": APP, "user_id": "alice", "events": [_event("secret")]}
        _assert_error(await anonymous.post("/v1/sessions/s9/events", json=write), 401, "invalid_token")
        _assert_error(await anonymous.post("/v1/forget", json={"user_id": "alice"}), 401, "invalid_token")
    async with httpx.AsyncClient(base_url=store, headers=ADMIN, timeout=30) as admin:
        assert (await admin.get("/v1/sessions")).json()["sessions"] == []


async def test_an_unset_credential_admits_no_one(memory_db: str) -> None:
    # Without an admin token, no request is the admin's: the admin routes are closed to every credential.
    async with memory_service(service_env(memory_db, admin_token="")) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            for method, path, data in ADMIN_ROUTES:
                _assert_error(await client.request(method, path, params=data, headers=ADMIN), 401, "invalid_token")  # type: ignore[arg-type]
                _assert_error(await client.request(method, path, params=data, headers=AGENT), 403, "admin_only")  # type: ignore[arg-type]
    # Without an agent token, only the admin's requests are served.
    async with memory_service(service_env(memory_db, agent_token="")) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            for method, path, data in AGENT_ROUTES:
                _assert_error(await _call(client, method, path, data), 401, "invalid_token")
                response = await client.get("/v1/sessions", params={"app_name": APP}, headers=AGENT)
                _assert_error(response, 401, "invalid_token")
            assert (await client.get("/v1/sessions", params={"app_name": APP}, headers=ADMIN)).status_code == 200


async def test_the_agent_sends_its_store_token_and_reports_a_refused_one(store: str) -> None:
    bound = RemoteMemory(store, APP, token=AGENT_TOKEN)
    stranger = RemoteMemory(store, APP, token="some-other-stores-token")
    await bound.start()
    await stranger.start()
    try:
        context = await bound.turn_context("s2", "hello", 6, "alice")
        assert context.events == []
        assert bound.degraded is None
        await stranger.turn_context("s2", "hello", 6, "alice")
        assert stranger.degraded is not None
        assert "MEMORY_STORE_TOKEN" in stranger.degraded
        assert "MEMORY_STORE_TOKEN" in stranger.status().details["memory"]
    finally:
        await bound.close()
        await stranger.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(token=st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=80))
def test_no_guessed_token_gets_in(store: str, token: str) -> None:
    if token in {ADMIN_TOKEN, AGENT_TOKEN}:
        return
    response = httpx.get(f"{store}/v1/jobs", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    _assert_error(response, 401, "invalid_token")
