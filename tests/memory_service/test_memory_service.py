"""The memory service (``kora memory``'s app) on a real Postgres with pgvector, through its HTTP API.

Sessions and events (the memory client's operations), the short-term window, recall by full text within scopes,
saved facts with deduplication, erasure across tiers, and the errors of bad requests.
"""

from __future__ import annotations

import httpx
import pytest

from kora.core.events import MemoryEvent
from tests.support.memory import ADMIN, memory_service, service_env

pytestmark = pytest.mark.integration

APP = "assistant"


def _event(event_type: str, content: object) -> dict[str, object]:
    return MemoryEvent(event_type=event_type, content=content).model_dump(mode="json")  # type: ignore[arg-type]


@pytest.fixture
async def memory(memory_db: str):
    """The memory service with no models: full-text recall only, no extraction or summaries."""
    async with memory_service(service_env(memory_db)) as url:
        async with httpx.AsyncClient(base_url=url, headers=ADMIN, timeout=30.0) as client:
            yield client


async def _write(client: httpx.AsyncClient, session_id: str, *events: dict[str, object], user: str | None = None):
    body: dict[str, object] = {"app_name": APP, "events": list(events)}
    if user is not None:
        body["user_id"] = user
    response = await client.post(f"/v1/sessions/{session_id}/events", json=body)
    assert response.status_code == 200, response.text
    return response.json()


async def test_ready_reports_missing_models(memory: httpx.AsyncClient) -> None:
    body = (await memory.get("/ready")).json()
    assert body["status"] == "ready"
    assert "no embedding model" in body["details"]["embedding"]
    assert "no summary model" in body["details"]["summary"]
    assert (await memory.get("/health")).json() == {"status": "ok"}


async def test_session_operations(memory: httpx.AsyncClient) -> None:
    created = (await memory.post("/v1/sessions", json={"app_name": APP, "user_id": "u1"})).json()
    session_id = created["session_id"]
    assert session_id.startswith("ses_")
    assert created["user_id"] == "u1"
    assert created["event_count"] == 0
    again = (
        await memory.post("/v1/sessions", json={"app_name": APP, "session_id": session_id, "user_id": "u1"})
    ).json()
    assert again["session_id"] == session_id
    # u1's session is u1's: a request without a user is refused it (test_session_ownership.py has the rest).
    anonymous = await memory.post("/v1/sessions", json={"app_name": APP, "session_id": session_id})
    assert anonymous.json()["error"]["code"] == "session_forbidden"
    assert again["created_at"] == created["created_at"]
    # The same id under another agent is another session.
    other = (await memory.post("/v1/sessions", json={"app_name": "other", "session_id": session_id})).json()
    assert other["app_name"] == "other"
    listed = (await memory.get("/v1/sessions", params={"app_name": APP})).json()["sessions"]
    assert [s["session_id"] for s in listed] == [session_id]
    assert (await memory.get(f"/v1/sessions/{session_id}", params={"app_name": APP})).status_code == 200
    deleted = await memory.delete(f"/v1/sessions/{session_id}", params={"app_name": APP})
    assert deleted.json() == {"deleted": True}
    missing = await memory.get(f"/v1/sessions/{session_id}", params={"app_name": APP})
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"
    assert (await memory.delete(f"/v1/sessions/{session_id}", params={"app_name": APP})).json() == {"deleted": False}


async def test_events_append_in_order_idempotently_and_filter(memory: httpx.AsyncClient) -> None:
    events = [
        _event("user_message", "What is 2+2?"),
        _event("tool_call", {"tool_name": "add", "args": {"a": 2, "b": 2}, "tool_call_id": "c1"}),
        _event("tool_result", {"tool_name": "add", "tool_call_id": "c1", "content": 4}),
        _event("agent_response", "4"),
    ]
    assert (await _write(memory, "s1", *events))["added"] == 4
    # A retried write stores nothing twice.
    assert (await _write(memory, "s1", *events))["added"] == 0
    got = (await memory.get("/v1/sessions/s1/events", params={"app_name": APP})).json()
    assert [e["event_id"] for e in got["events"]] == [e["event_id"] for e in events]
    assert got["total"] == 4
    assert got["events"][1]["content"] == events[1]["content"]
    only = await memory.get(
        "/v1/sessions/s1/events", params={"app_name": APP, "event_type": ["user_message", "agent_response"]}
    )
    assert [e["event_type"] for e in only.json()["events"]] == ["user_message", "agent_response"]
    newest = (await memory.get("/v1/sessions/s1/events", params={"app_name": APP, "limit": 1})).json()
    assert [e["content"] for e in newest["events"]] == ["4"]
    assert newest["total"] == 4
    unknown = (await memory.get("/v1/sessions/nope/events", params={"app_name": APP})).json()
    assert unknown == {"events": [], "total": 0}
    across = (await memory.get("/v1/events", params={"app_name": APP, "limit": 2})).json()
    assert [e["event_type"] for e in across["events"]] == ["tool_result", "agent_response"]


async def test_context_window_is_bounded_by_events_and_tokens(memory: httpx.AsyncClient) -> None:
    await _write(memory, "s1", *[_event("user_message", f"message number {n} " + "x" * 36) for n in range(10)])
    body = {"app_name": APP, "max_events": 6, "token_budget": 2000}
    window = (await memory.post("/v1/sessions/s1/context", json=body)).json()["window"]
    assert [e["content"].split()[2] for e in window] == ["4", "5", "6", "7", "8", "9"]
    # Each event is ~14 tokens (56 characters): a 30-token budget holds the newest two.
    body["token_budget"] = 30
    window = (await memory.post("/v1/sessions/s1/context", json=body)).json()["window"]
    assert [e["content"].split()[2] for e in window] == ["8", "9"]
    fresh = (await memory.post("/v1/sessions/new/context", json=body)).json()
    assert fresh == {"summary": None, "window": [], "facts": []}


async def test_saved_facts_are_recalled_within_their_scope_and_deduplicated(memory: httpx.AsyncClient) -> None:
    async def save(content: str, user: str | None, session: str) -> dict[str, str]:
        body = {"content": content, "app_name": APP, "session_id": session, "attribution": {"agent": APP}}
        if user:
            body["user_id"] = user
        response = await memory.post("/v1/facts", json=body)
        assert response.status_code == 200, response.text
        return response.json()

    first = await save("The user lives in Paris.", "alice", "s1")
    assert first["status"] == "stored"
    assert await save("the user lives in paris", "alice", "s2") == {"fact_id": first["fact_id"], "status": "duplicate"}
    lyon = await save("The user lives in Lyon.", "alice", "s2")
    assert lyon["status"] == "stored"  # similar words, another fact
    await save("The user is allergic to peanuts.", "bob", "s3")
    await save("The user keeps bees.", None, "s4")

    async def recall(query: str, scope: str, **keys: str) -> list[str]:
        response = await memory.post("/v1/recall", json={"query": query, "scope": scope, "app_name": APP, **keys})
        assert response.status_code == 200, response.text
        return [hit["text"] for hit in response.json()["hits"]]

    assert await recall("where does the user live", "user", user_id="alice") == [
        "The user lives in Lyon.",
        "The user lives in Paris.",
    ]
    assert await recall("where does the user live", "session", session_id="s1", user_id="alice") == [
        "The user lives in Paris."
    ]
    # A session's facts of a verified user are not anyone's who names the session.
    assert await recall("where does the user live", "session", session_id="s1") == []
    assert await recall("allergies peanuts", "user", user_id="alice") == []
    assert await recall("allergic to peanuts", "agent", user_id="bob") == ["The user is allergic to peanuts."]
    # An anonymous fact is only ever seen from its own session.
    assert await recall("bees", "session", session_id="s4") == ["The user keeps bees."]
    assert await recall("bees", "user", user_id="alice") == []


async def test_rare_words_outweigh_common_ones_and_a_neighbour_lifts_its_candidate(memory: httpx.AsyncClient) -> None:
    # Stored in this order by one owner. The names are in three facts of four, "pottery" in one: weighted by
    # rarity, the pottery fact answers first although it holds one word of three (a plain share of the query's
    # words would put it last); the two facts stored just before it (within two places) are lifted above their
    # equal, the first fact, by that neighbour.
    texts = [
        "Melanie and Caroline talked about the weather.",
        "Melanie and Caroline met for lunch.",
        "Melanie and Caroline went shopping.",
        "The pottery class was on Friday.",
    ]
    for text in texts:
        body = {"content": text, "app_name": APP, "user_id": "carol", "session_id": "s9"}
        assert (await memory.post("/v1/facts", json=body)).json()["status"] == "stored"
    response = await memory.post(
        "/v1/recall",
        json={"query": "Melanie Caroline pottery", "scope": "user", "app_name": APP, "user_id": "carol", "top_k": 4},
    )
    assert response.status_code == 200, response.text
    hits = response.json()["hits"]
    # Equal scores (shopping, lunch: each lifted by the pottery fact) keep the newer first.
    assert [hit["text"] for hit in hits] == [texts[3], texts[2], texts[1], texts[0]]
    assert hits[1]["score"] == hits[2]["score"] > hits[3]["score"]
    assert all(0.0 <= hit["score"] <= 1.0 for hit in hits)


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        ({"query": "x", "scope": "user"}, 400, "needs a verified user_id"),
        ({"query": "x", "scope": "agent"}, 400, "needs a verified user_id"),
        ({"query": "x", "scope": "store", "user_id": "u"}, 403, "ceiling"),
        ({"query": "x", "scope": "session"}, 400, "needs a session_id"),
        ({"query": "", "scope": "session", "session_id": "s"}, 400, "query"),
        ({"query": "x", "scope": "galaxy", "session_id": "s"}, 400, "scope"),
        ({"query": "x", "session_id": "s", "extra": 1}, 400, "extra"),
    ],
)
async def test_recall_rejects_bad_scopes(memory: httpx.AsyncClient, body: dict, status: int, fragment: str) -> None:
    response = await memory.post("/v1/recall", json={"app_name": APP, **body})
    assert response.status_code == status
    assert fragment in response.json()["error"]["message"]


async def test_scope_above_the_store_ceiling_is_forbidden(memory_db: str) -> None:
    async with memory_service(service_env(memory_db, max_read_scope="agent")) as url:
        async with httpx.AsyncClient(base_url=url, headers=ADMIN) as client:
            body = {"query": "x", "scope": "user", "app_name": APP, "user_id": "u"}
            response = await client.post("/v1/recall", json=body)
            assert response.status_code == 403
            body["scope"] = "agent"
            assert (await client.post("/v1/recall", json=body)).status_code == 200


async def test_a_session_of_another_user_is_refused(memory: httpx.AsyncClient) -> None:
    await _write(memory, "s1", _event("user_message", "hi"), user="alice")
    response = await memory.post(
        "/v1/sessions/s1/events", json={"app_name": APP, "user_id": "mallory", "events": [_event("user_message", "x")]}
    )
    assert response.status_code == 403
    got = (await memory.get("/v1/sessions/s1/events", params={"app_name": APP})).json()
    assert [e["content"] for e in got["events"]] == ["hi"]


async def test_unstorable_text_is_refused_and_nothing_is_stored(memory: httpx.AsyncClient) -> None:
    good = _event("user_message", "kept")
    await _write(memory, "s1", good)
    for content in ("\udc80", "nul\x00", {"k\x00": 1}, ["deep", {"x": "\ud800"}]):
        body = {"app_name": APP, "events": [_event("user_message", "fine"), _event("user_message", content)]}
        response = await memory.post("/v1/sessions/s1/events", content=_dumps(body))
        assert response.status_code == 400, response.text
        assert response.json()["error"]["type"] == "invalid_request_error"
    got = (await memory.get("/v1/sessions/s1/events", params={"app_name": APP})).json()
    assert [e["content"] for e in got["events"]] == ["kept"]


def _dumps(body: object) -> bytes:
    import json

    return json.dumps(body).encode()


async def test_forget_a_user_erases_every_tier(memory: httpx.AsyncClient) -> None:
    await _write(memory, "s1", _event("user_message", "I live in Paris"), user="alice")
    await _write(memory, "s2", _event("user_message", "Keep this"), user="bob")
    await memory.post(
        "/v1/facts",
        json={"content": "The user lives in Paris.", "app_name": APP, "user_id": "alice", "session_id": "s1"},
    )
    response = await memory.post("/v1/forget", json={"user_id": "alice"})
    assert response.status_code == 200
    removed = response.json()["removed"]
    assert removed["sessions"] == 1
    assert removed["events"] == 1
    assert removed["facts"] == 1
    assert removed["fact_history"] == 1
    hits = await memory.post(
        "/v1/recall", json={"query": "Paris", "scope": "user", "app_name": APP, "user_id": "alice"}
    )
    assert hits.json()["hits"] == []
    assert (await memory.get("/v1/sessions", params={"user_id": "bob"})).json()["sessions"][0]["event_count"] == 1
    assert (await memory.post("/v1/forget", json={})).status_code == 400
    assert (await memory.post("/v1/forget", json={"user_id": "a", "session_id": "b"})).status_code == 400
