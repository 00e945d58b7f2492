"""Hostile input against every route of the memory service, on a real Postgres.

Whatever a client sends (lone surrogates, control characters, NUL, JSON nested 10 000 deep, wrong types, numbers
beyond int64 or float, NaN, timestamps out of range, broken bytes), the service answers below 500, every 4xx
carries a JSON error body, and what was stored before is unchanged. Hypothesis mutates valid requests one field at
a time; the named cases of the brief are spelled out first.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kora.memory_service.app import create_app
from kora.memory_service.settings import load_memory_service_settings
from tests.support.hostile import Raw, render
from tests.support.memory import ADMIN, fresh_database, service_env, wait_until_ready
from tests.support.threaded import ThreadedServer

pytestmark = pytest.mark.integration

SEED_APP, SEED_USER, SEED_SESSION = "seed-app", "seed-user", "seed-session"
APP, USER, SESSION = "h-app", "h-user", "h-session"


@dataclass
class Target:
    """The service under attack and what it held before."""

    client: httpx.Client
    snapshot: dict[str, object]

    def stored(self) -> dict[str, object]:
        events = self.client.get(f"/v1/sessions/{SEED_SESSION}/events", params={"app_name": SEED_APP}).json()
        found = self.client.get("/v1/facts", params={"scope": "user", "user_id": SEED_USER, "include_invalid": True})
        sessions = self.client.get("/v1/sessions", params={"user_id": SEED_USER}).json()
        return {"events": events, "facts": found.json(), "sessions": sessions}


@pytest.fixture(scope="module")
def target(postgres: str) -> Iterator[Target]:
    """One memory service (no models) for the module, with a seeded user whose data must never change."""
    settings_ = load_memory_service_settings(service_env(fresh_database(postgres)))
    with ThreadedServer(create_app(settings_), name="memory", lifespan="on") as server:
        wait_until_ready(server.root_url)
        with httpx.Client(base_url=server.root_url, headers=ADMIN, timeout=60.0) as client:
            written = client.post(
                f"/v1/sessions/{SEED_SESSION}/events",
                json={
                    "app_name": SEED_APP,
                    "user_id": SEED_USER,
                    "events": [
                        {"event_type": "user_message", "content": "I keep bees in Lyon."},
                        {"event_type": "agent_response", "content": "Noted."},
                    ],
                },
            )
            assert written.status_code == 200, written.text
            saved = client.post(
                "/v1/facts",
                json={"content": "The user keeps bees.", "app_name": SEED_APP, "user_id": SEED_USER},
            )
            assert saved.status_code == 200, saved.text
            probe = Target(client, {})
            probe.snapshot = probe.stored()
            assert len(probe.snapshot["events"]["events"]) == 2  # type: ignore[index]
            yield probe


def assert_handled(response: httpx.Response) -> None:
    """Below 500, and a 4xx says why in the service's JSON error body."""
    assert response.status_code < 500, (response.status_code, response.text[:500])
    if response.status_code >= 400:
        error = response.json()["error"]
        assert isinstance(error["message"], str)
        assert error["message"]
        assert error["type"]


def send(target: Target, method: str, path: str, body: str | bytes | None = None, query: str = "") -> httpx.Response:
    content = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
    headers = {"content-type": "application/json"} if content is not None else {}
    url = f"{path}?{query}" if query else path
    response = target.client.request(method, url, content=content, headers=headers)
    assert_handled(response)
    return response


def assert_unchanged(target: Target) -> None:
    assert target.stored() == target.snapshot


# -- the named cases ------------------------------------------------------------------------------------------

EVENT = {"event_type": "user_message", "content": "hi"}
POST_ROUTES = {
    "/v1/sessions": {"app_name": APP, "session_id": SESSION, "user_id": USER},
    f"/v1/sessions/{SESSION}/events": {"app_name": APP, "user_id": USER, "events": [EVENT]},
    f"/v1/sessions/{SESSION}/context": {"app_name": APP, "user_id": USER, "query": "bees", "scope": "session"},
    "/v1/recall": {"query": "bees", "scope": "session", "app_name": APP, "session_id": SESSION},
    "/v1/facts": {"content": "The user likes tea.", "app_name": APP, "session_id": SESSION},
    "/v1/forget": {"session_id": SESSION},
}
LIMIT_ROUTES = ["/v1/sessions", f"/v1/sessions/{SESSION}/events?app_name={APP}", "/v1/events", "/v1/facts", "/v1/jobs"]


@pytest.mark.parametrize("path", list(POST_ROUTES))
@pytest.mark.parametrize("opening", ["[", '{"a":'])
def test_a_body_nested_ten_thousand_deep_is_a_400(target: Target, path: str, opening: str) -> None:
    closing = "]" if opening == "[" else "}"
    assert send(target, "POST", path, opening * 10_000 + closing * 10_000).status_code == 400
    inside = render({**POST_ROUTES[path], "x": Raw(opening * 10_000 + "1" + closing * 10_000)})
    assert send(target, "POST", path, inside).status_code == 400
    assert_unchanged(target)


@pytest.mark.parametrize("path", LIMIT_ROUTES)
@pytest.mark.parametrize("limit", [str(2**63), str(-(2**63) - 1), "9" * 400, "1e400", "NaN", "-1", "1.5", "0x10"])
def test_limits_beyond_int64_or_not_integers_are_a_400(target: Target, path: str, limit: str) -> None:
    separator = "&" if "?" in path else "?"
    response = target.client.get(f"{path}{separator}limit={quote(limit)}")
    assert response.status_code == 400, response.text
    assert "limit" in response.json()["error"]["message"]


def test_an_event_type_filter_that_is_no_event_type_is_a_400(target: Target) -> None:
    path = f"/v1/sessions/{SEED_SESSION}/events"
    for value in ["bogus", "", "user_message\x00", "USER_MESSAGE"]:
        response = target.client.get(path, params={"app_name": SEED_APP, "event_type": ["user_message", value]})
        assert response.status_code == 400, response.text
        assert "event_type" in response.json()["error"]["message"]
    ok = target.client.get(path, params={"app_name": SEED_APP, "event_type": "agent_response"})
    assert [e["content"] for e in ok.json()["events"]] == ["Noted."]


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        # Refused by the request limits (kora.core.limits) before the body models see them.
        ("content", Raw("NaN"), "not JSON"),
        ("content", Raw("Infinity"), "not JSON"),
        ("content", Raw("-1e400"), "too large"),
        ("metadata", {"n": Raw("1e999")}, "too large"),
        ("content", {"deep": [[[["\ud800"]]]]}, "surrogate"),
        ("content", "nul \x00 inside", "NUL"),
        ("metadata", {"k\x00": 1}, "NUL"),
        ("event_id", "e" * 257, "event_id"),
        ("event_id", "evt\n1", "control"),
        ("event_type", "nope", "event_type"),
        ("event_type", 1, "event_type"),
        ("timestamp", "0001-01-01T00:00:00+14:00", "years 1-9999"),
        ("timestamp", "9999-12-31T23:59:59-14:00", "years 1-9999"),
        ("timestamp", Raw("1e20"), "timestamp"),
        ("content", Raw("1" * 5000), ""),
    ],
)
def test_unstorable_event_fields_are_a_400_and_nothing_is_stored(
    target: Target, field: str, value: object, fragment: str
) -> None:
    event = {"event_type": "user_message", "content": "x", field: value}
    body = render({"app_name": SEED_APP, "user_id": SEED_USER, "events": [{"event_type": "user_message"}, event]})
    response = send(target, "POST", f"/v1/sessions/{SEED_SESSION}/events", body)
    assert response.status_code == 400
    assert fragment in response.json()["error"]["message"]
    assert_unchanged(target)


def test_session_metadata_beyond_openais_bounds_is_a_400_and_nothing_changes(target: Target) -> None:
    for metadata in (
        {str(i): "v" for i in range(17)},
        {"k" * 65: "v"},
        {"k": "v" * 513},
        {"k": 5},
        {"k": "a\u0000b"},
        "text",
    ):
        body = json.dumps({"app_name": APP, "user_id": USER, "metadata": metadata})
        response = send(target, "PUT", f"/v1/sessions/{SESSION}/metadata", body)
        assert response.status_code == 400, (metadata, response.text)
    assert_unchanged(target)
    unknown = send(target, "GET", "/v1/sessions/nobody-has-this/metadata", query=f"app_name={APP}")
    assert unknown.status_code == 404


def test_values_at_the_edges_are_stored_and_read_back(target: Target) -> None:
    """What the database can hold is kept as sent: integers beyond int64, naive timestamps (taken as UTC), years
    1 and 9999, and a text too long for one full-text entry (its search text is cut, the content is whole)."""
    long_text = " ".join(f"word{n}" for n in range(200_000))  # ~1.8 MB: over Postgres's 1 MB tsvector limit
    events = [
        {"event_id": "big", "event_type": "user_message", "content": Raw(str(10**40)), "metadata": {"n": -(2**70)}},
        {"event_id": "naive", "event_type": "user_message", "content": "x", "timestamp": "2020-01-01T12:00:00"},
        {"event_id": "y1", "event_type": "user_message", "content": "x", "timestamp": "0001-01-01T00:00:00Z"},
        {"event_id": "y9999", "event_type": "user_message", "content": "x", "timestamp": "9999-12-31T23:59:59Z"},
        {"event_id": "long", "event_type": "user_message", "content": long_text},
    ]
    body = render({"app_name": APP, "events": events})
    assert send(target, "POST", "/v1/sessions/edges/events", body).json()["added"] == 5
    got = {e["event_id"]: e for e in target.client.get("/v1/sessions/edges/events?app_name=h-app").json()["events"]}
    assert got["big"]["content"] == 10**40
    assert got["big"]["metadata"] == {"n": -(2**70)}
    assert got["naive"]["timestamp"] == "2020-01-01T12:00:00Z"
    assert got["y1"]["timestamp"].startswith("0001-01-01")
    assert got["long"]["content"] == long_text
    found = target.client.post(
        "/v1/recall",
        json={"query": "word17", "scope": "session", "app_name": APP, "session_id": "edges", "include_events": True},
    )
    assert [hit["id"] for hit in found.json()["hits"]] == ["long"]
    assert_unchanged(target)


# -- everything else, by Hypothesis ---------------------------------------------------------------------------

_CONTROL = st.characters(max_codepoint=0x1F)
hostile_text = st.one_of(
    st.text(max_size=20),
    st.text(_CONTROL, min_size=1, max_size=4),
    st.text(st.characters(categories=["Cs"]), min_size=1, max_size=3),
    st.sampled_from(["", " ", "\x00", "a\x00b", "\u2028", "\ufeff", "\U0001f4a5" * 3, "x" * 300, "seed-app"]),
)
hostile_number = st.one_of(
    st.integers(),
    st.sampled_from([2**63, -(2**63) - 1, 2**64, 10**30, -(10**30), 0, -1, True, False]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([Raw("1e400"), Raw("-1e400"), Raw("1" * 5000), Raw("NaN"), Raw("-Infinity")]),
)
deep = st.builds(
    lambda n, opening: Raw(opening * n + "0" + ("]" if opening == "[" else "}") * n),
    st.integers(1, 12_000),
    st.sampled_from(["[", '{"k":']),
)
hostile_value = st.recursive(
    st.one_of(st.none(), hostile_text, hostile_number, deep),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(hostile_text, inner, max_size=3),
    max_leaves=8,
)


def mutate(draw: st.DrawFn, body: dict[str, object]) -> str:
    """``body`` with one hostile change: a field (at the top or in the first event) replaced, dropped or added,
    or the whole body replaced."""
    body = json.loads(json.dumps(body))
    holder: dict[str, object] = body
    events = body.get("events")
    if isinstance(events, list) and events and draw(st.booleans()):
        holder = events[0]
    match draw(st.sampled_from(["replace", "replace", "drop", "add", "whole"])):
        case "replace":
            holder[draw(st.sampled_from(sorted(holder)))] = draw(hostile_value)
        case "drop":
            holder.pop(draw(st.sampled_from(sorted(holder))))
        case "add":
            holder[draw(hostile_text)] = draw(hostile_value)
        case _:
            return render(draw(hostile_value))
    return render(body)


FULL_POST_ROUTES = {
    "/v1/sessions": POST_ROUTES["/v1/sessions"],
    "/v1/sessions/{id}/events": {
        "app_name": APP,
        "user_id": USER,
        "rolling_summary": False,
        "events": [
            {
                "event_id": "e1",
                "event_type": "tool_call",
                "timestamp": "2026-01-01T00:00:00Z",
                "content": {"tool_name": "add", "args": {"a": 1}, "tool_call_id": "c1"},
                "metadata": {"k": "v"},
            }
        ],
    },
    "/v1/sessions/{id}/context": {
        "app_name": APP,
        "user_id": USER,
        "query": "bees",
        "scope": "session",
        "top_k": 3,
        "max_events": 6,
        "token_budget": 100,
    },
    "/v1/recall": {
        "query": "bees",
        "scope": "session",
        "app_name": APP,
        "user_id": USER,
        "session_id": SESSION,
        "top_k": 3,
        "include_events": True,
    },
    "/v1/facts": {
        "content": "The user likes tea.",
        "app_name": APP,
        "user_id": USER,
        "session_id": SESSION,
        "attribution": {"agent": APP},
    },
    "/v1/forget": {"session_id": SESSION},
}
GET_ROUTES: dict[tuple[str, str], dict[str, str]] = {
    ("GET", "/v1/sessions"): {"app_name": APP, "user_id": USER, "limit": "5"},
    ("GET", "/v1/sessions/{id}"): {"app_name": APP},
    ("DELETE", "/v1/sessions/{id}"): {"app_name": APP},
    ("GET", "/v1/sessions/{id}/metadata"): {"app_name": APP},
    ("GET", "/v1/sessions/{id}/events"): {"app_name": APP, "event_type": "user_message", "limit": "5"},
    ("GET", "/v1/events"): {"app_name": APP, "limit": "5"},
    ("GET", "/v1/facts"): {
        "app_name": APP,
        "scope": "session",
        "user_id": USER,
        "session_id": SESSION,
        "include_invalid": "true",
        "limit": "5",
    },
    ("GET", "/v1/facts/{id}/history"): {},
    ("GET", "/v1/jobs"): {"status": "failed", "limit": "5"},
    ("GET", "/health"): {},
    ("GET", "/ready"): {},
}
hostile_param = st.one_of(
    hostile_text,
    hostile_number.map(lambda n: n.text if isinstance(n, Raw) else str(n)),
    st.sampled_from(["%", "%%", "%zz", "%ff%fe", "%ed%a0%80", "&", "="]),
)


def _quote(value: str) -> str:
    # Lone surrogates go out as their (invalid) UTF-8 bytes: the service must cope with what a client can send.
    return quote(value.encode("utf-8", "surrogatepass"), safe="%")


@st.composite
def post_requests(draw: st.DrawFn) -> tuple[str, str]:
    route = draw(st.sampled_from(sorted(FULL_POST_ROUTES)))
    session = draw(st.one_of(st.just(SESSION), hostile_param))
    match draw(st.sampled_from(["mutated"] * 8 + ["bytes", "truncated"])):
        case "mutated":
            body = mutate(draw, FULL_POST_ROUTES[route])
        case "bytes":
            body = draw(st.binary(max_size=40)).decode("latin-1")
        case _:
            body = render(FULL_POST_ROUTES[route])[: -draw(st.integers(1, 10))]
    return route.replace("{id}", _quote(session) or "x"), body


@st.composite
def get_requests(draw: st.DrawFn) -> tuple[str, str, str]:
    method, route = draw(st.sampled_from(sorted(GET_ROUTES)))
    params = dict(GET_ROUTES[(method, route)])
    for _ in range(draw(st.integers(1, 2))):
        key = draw(st.sampled_from(sorted(params))) if params and draw(st.booleans()) else draw(hostile_text)
        params[key] = draw(hostile_param)
    path_id = draw(st.one_of(st.just(SESSION), hostile_param))
    query = "&".join(f"{_quote(k)}={_quote(v)}" for k, v in params.items())
    return method, route.replace("{id}", _quote(path_id) or "x"), query


FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(request=post_requests())
def test_hostile_bodies_never_break_the_service(target: Target, request: tuple[str, str]) -> None:
    path, body = request
    send(target, "POST", path, body)
    assert_unchanged(target)


@FUZZ
@given(request=get_requests())
def test_hostile_paths_and_parameters_never_break_the_service(target: Target, request: tuple[str, str, str]) -> None:
    method, path, query = request
    send(target, method, path, query=query)
    assert_unchanged(target)
