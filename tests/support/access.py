"""docs/identity.md's access tables as tests walk them: the table read from the document, each caller's headers,
and a walk of every row against every route the table names (:func:`walk_agent_table`, :func:`walk_store_table`),
shared by the integration test (servers in this process) and the ``kora up`` one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

DOC = Path(__file__).resolve().parents[2] / "docs" / "identity.md"
APP = "assistant"
USER = "X-User"


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def agent_callers(operator_token: str, store_agent_token: str) -> dict[str, dict[str, str]]:
    """Each caller's headers towards an agent whose operator token is ``operator_token`` and whose store knows its
    bound agents by ``store_agent_token`` (which a bound agent would present)."""
    return {
        "anonymous": {},
        "user A": {USER: "alice"},
        "user B": {USER: "bob"},
        "bound agent": _bearer(store_agent_token),
        "other agent": _bearer("another-stores-agent-token"),
        "operator": _bearer(operator_token),
    }


def store_callers(admin_token: str, agent_token: str) -> dict[str, dict[str, str]]:
    """Each caller's headers towards a memory service with these credentials (users present their JWT)."""
    return {
        "anonymous": {},
        "user A": {USER: "alice", **_bearer("eyJhbGciOiJSUzI1NiJ9.alice.signature")},
        "user B": {USER: "bob", **_bearer("eyJhbGciOiJSUzI1NiJ9.bob.signature")},
        "bound agent": _bearer(agent_token),
        "other agent": _bearer("another-stores-agent-token"),
        "operator": _bearer(admin_token),
    }


def access_table(name: str) -> tuple[list[str], dict[str, list[str]]]:
    """The table after ``<!-- access-table: name -->``: its column headers and, per caller, its cells."""
    text = DOC.read_text(encoding="utf-8")
    block = text.split(f"<!-- access-table: {name} -->", 1)[1].strip().split("\n\n", 1)[0]
    lines = [line.strip().strip("|").split("|") for line in block.splitlines()]
    header = [cell.strip() for cell in lines[0][1:]]
    rows = {cells[0].strip(): [cell.strip() for cell in cells[1:]] for cells in lines[2:]}
    return header, rows


def _chat(base: str, user: str) -> str:
    response = httpx.post(
        f"{base}/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": f"{user} says hello"}]},
        headers={USER: user},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    return response.headers["x-session-id"]


def _listed(response: httpx.Response) -> set[str]:
    """Whose sessions or events an answer of a listing holds: ``{"alice", "bob"}`` or a part."""
    body = response.json()
    if "sessions" in body:
        return {s["user_id"] for s in body["sessions"]}
    users = set()
    for event in body["events"]:
        if event["event_type"] == "user_message":
            users.add(str(event["content"]).split()[0])
    return users


def _check_agent_cell(expected: str, response: httpx.Response, where: str) -> None:
    status, _, whose = expected.partition(", ")
    assert response.status_code == int(status), (where, response.text)
    wanted = {"none": set(), "A's": {"alice"}, "B's": {"bob"}, "all": {"alice", "bob"}}
    if whose:
        assert _listed(response) == wanted[whose], (where, response.text)


def _agent_request(column: str, base: str, headers: dict[str, str], fresh: Callable[[], str]) -> httpx.Response:
    """The request of a column of the agent table; ``fresh`` starts a new session of alice and returns its id."""
    if column == "`GET /memory/sessions`":
        return httpx.get(f"{base}/memory/sessions", headers=headers, timeout=30)
    if column == "`GET /memory/events`":
        return httpx.get(f"{base}/memory/events", headers=headers, timeout=30)
    if column == "`GET /memory/events?session_id=<A's>`":
        return httpx.get(f"{base}/memory/events", params={"session_id": fresh()}, headers=headers, timeout=30)
    if column == "`DELETE /memory/sessions/<A's>`":
        return httpx.delete(f"{base}/memory/sessions/{fresh()}", headers=headers, timeout=30)
    if column == "`DELETE /memory/users/<A>`":
        fresh()
        return httpx.delete(f"{base}/memory/users/alice", headers=headers, timeout=30)
    raise AssertionError(f"docs/identity.md names a route this test does not know: {column}")


def _store_requests(fact_id: str) -> dict[str, list[tuple[str, str, dict[str, Any]]]]:
    """Per column of the store table, every request it stands for (method, path, JSON body or query)."""
    event = {"event_type": "user_message", "content": "alice says hi"}
    return {
        "agent": [
            ("GET", "/v1/sessions", {"app_name": APP}),
            ("GET", "/v1/events", {"app_name": APP, "user_id": "alice"}),
            ("POST", "/v1/sessions/t1/events", {"app_name": APP, "user_id": "alice", "events": [event]}),
            ("GET", "/v1/sessions/t1/events", {"app_name": APP}),
            ("POST", "/v1/sessions/t1/context", {"app_name": APP, "user_id": "alice", "query": "hi"}),
            ("POST", "/v1/recall", {"query": "hi", "scope": "user", "app_name": APP, "user_id": "alice"}),
            ("POST", "/v1/facts", {"content": "Alice likes tea.", "app_name": APP, "user_id": "alice"}),
            ("POST", "/v1/forget", {"session_id": "t1"}),
            ("GET", "/v1/erasures", {}),
        ],
        "admin": [
            ("GET", "/v1/sessions", {}),
            ("GET", "/v1/events", {}),
            ("GET", "/v1/facts", {"scope": "store"}),
            ("GET", f"/v1/facts/{fact_id}/history", {}),
            ("GET", "/v1/jobs", {}),
        ],
    }


def _store_call(base: str, method: str, path: str, data: dict[str, Any], headers: dict[str, str]) -> httpx.Response:
    if method == "GET":
        return httpx.get(f"{base}{path}", params=data, headers=headers, timeout=30)
    return httpx.request(method, f"{base}{path}", json=data, headers=headers, timeout=30)


def walk_agent_table(base: str, callers: dict[str, dict[str, str]]) -> None:
    """Check every cell of docs/identity.md's agent table against the agent at ``base`` (an agent bound to a
    store, whose users are named by the trusted header ``X-User``); ``callers`` from :func:`agent_callers`."""
    header, rows = access_table("agent")
    assert set(rows) == set(callers)
    operator = callers["operator"]
    _chat(base, "bob")
    for caller, cells in rows.items():
        for column, expected in zip(header, cells, strict=True):
            listed = httpx.get(f"{base}/memory/sessions", headers=operator, timeout=30)
            if "alice" not in _listed(listed):
                _chat(base, "alice")
            response = _agent_request(column, base, callers[caller], lambda: _chat(base, "alice"))
            _check_agent_cell(expected, response, f"{caller} / {column}")


def walk_store_table(base: str, callers: dict[str, dict[str, str]]) -> None:
    """Check every cell of docs/identity.md's store table against the memory service at ``base``; ``callers``
    from :func:`store_callers`."""
    header, rows = access_table("store")
    assert set(rows) == set(callers)
    fact = {"content": "Bob likes tea.", "app_name": APP, "user_id": "bob"}
    created = httpx.post(f"{base}/v1/facts", json=fact, headers=callers["operator"], timeout=30)
    requests = _store_requests(created.json()["fact_id"])
    for caller, cells in rows.items():
        for column, expected in zip(header, cells, strict=True):
            kind = "admin" if column.startswith("every agent's") else "agent"
            for method, path, data in requests[kind]:
                response = _store_call(base, method, path, data, callers[caller])
                assert response.status_code == int(expected), (caller, method, path, response.text)
