"""The memory service's background tiers on a real Postgres, with the scripted model as the summary model.

Long term: a turn's events queue a fact extraction; its facts appear with attribution and the ids of the events
they came from; invalid answers are retried, then the job is recorded as failed; an unreachable model makes the
job wait and try again. Facts are kept once across extraction and ``save_memory`` (same text, or nearly the same
words), and a fact that the conflict check says a newer one contradicts is superseded, with its history.
Medium term: folds of the events that left the window make versioned rolling summaries, oldest events first,
and two replicas never fold one session at once. Erasure while jobs are queued or running leaves nothing behind.

Without an embedding model (the scripted model serves none yet), recall and deduplication use full text only;
the embedding paths are left to the tests that will have one.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import psycopg
import pytest
from starlette.types import Receive, Scope, Send

from kora.core.events import MemoryEvent
from kora.core.net import free_port
from kora.scripted.model import ScriptedModel
from kora.scripted.model import create_app as create_model_app
from kora.scripted.script import ErrorReply, Match, Rule, TextReply
from tests.support.memory import ADMIN, EXTRACTED_FACTS_FORMAT, eventually, memory_service, model_env, service_env
from tests.support.scripted_server import ScriptedModelServer
from tests.support.threaded import ThreadedServer

pytestmark = pytest.mark.integration

APP = "assistant"


def event(event_type: str, content: object) -> dict[str, object]:
    return MemoryEvent(event_type=event_type, content=content).model_dump(mode="json")  # type: ignore[arg-type]


def turn(user_text: str, answer: str) -> list[dict[str, object]]:
    return [event("user_message", user_text), event("agent_response", answer)]


def facts_reply(*facts: str, delay: float = 0.0) -> TextReply:
    return TextReply(json.dumps({"facts": list(facts)}), delay_seconds=delay)


def extracts(user_text: str, *facts: str, delay: float = 0.0) -> Rule:
    """Answer the extraction of a turn whose user line says ``user_text`` with ``facts``."""
    return Rule(Match(user_matches=f"user: {user_text}"), facts_reply(*facts, delay=delay))


#: The conflict check finds nothing contradicted unless a rule before this one says otherwise.
NO_CONFLICT = Rule(Match(user_matches="^New fact: "), TextReply('{"contradicted": []}'))
#: Extraction of any other turn finds nothing.
NO_FACTS = Rule(Match(), facts_reply())


def kind(request: dict) -> str:
    """Which of the service's model requests this is: extract, conflict or fold."""
    if request.get("response_format") is None:
        return "fold"
    return {"extracted_facts": "extract", "fact_conflicts": "conflict"}[
        request["response_format"]["json_schema"]["name"]
    ]


def requests_of(model: ScriptedModelServer, wanted: str) -> list[dict]:
    return [request for request in model.requests if kind(request) == wanted]


def user_text(request: dict) -> str:
    return request["messages"][-1]["content"]


@asynccontextmanager
async def service(memory_db: str, model: ScriptedModelServer | None, **extra: str) -> AsyncIterator[httpx.AsyncClient]:
    """The memory service on ``memory_db`` (one worker unless ``extra`` says), ``model`` as its summary model."""
    env = {"workers": "1", **(model_env(model.url) if model is not None else {}), **extra}
    async with memory_service(service_env(memory_db, **env)) as url:
        async with httpx.AsyncClient(base_url=url, headers=ADMIN, timeout=60.0) as client:
            yield client


async def write(
    client: httpx.AsyncClient,
    session_id: str,
    events: list[dict[str, object]],
    user: str | None = "alice",
    rolling_summary: bool = False,
) -> None:
    body: dict[str, object] = {"app_name": APP, "events": events, "rolling_summary": rolling_summary}
    if user is not None:
        body["user_id"] = user
    response = await client.post(f"/v1/sessions/{session_id}/events", json=body)
    assert response.status_code == 200, response.text


async def save(client: httpx.AsyncClient, content: str, session_id: str = "s1", user: str = "alice") -> dict:
    body = {"content": content, "app_name": APP, "user_id": user, "session_id": session_id}
    response = await client.post("/v1/facts", json=body)
    assert response.status_code == 200, response.text
    return response.json()


async def facts_of(client: httpx.AsyncClient, user: str = "alice", include_invalid: bool = False) -> list[dict]:
    params: dict[str, str | bool] = {"scope": "user", "user_id": user, "include_invalid": include_invalid}
    response = await client.get("/v1/facts", params=params)
    assert response.status_code == 200, response.text
    return response.json()["facts"]


async def jobs(client: httpx.AsyncClient, status: str | None = None) -> list[dict]:
    response = await client.get("/v1/jobs", params={"status": status} if status else {})
    assert response.status_code == 200, response.text
    return response.json()["jobs"]


async def recall(client: httpx.AsyncClient, query: str, user: str = "alice") -> list[str]:
    body = {"query": query, "scope": "user", "app_name": APP, "user_id": user}
    response = await client.post("/v1/recall", json=body)
    assert response.status_code == 200, response.text
    return [hit["text"] for hit in response.json()["hits"]]


async def idle(client: httpx.AsyncClient) -> bool:
    """True once no job is queued or running (the jobs table is empty)."""
    return not await jobs(client)


# -- long term: extraction --------------------------------------------------------------------------------------


async def test_a_turn_is_extracted_into_attributed_facts(memory_db: str, model: ScriptedModelServer) -> None:
    model.load_script([extracts("I live in Paris", "The user lives in Paris.", "The user has two cats."), NO_CONFLICT])
    async with service(memory_db, model) as client:
        events = [
            event("user_message", "I live in Paris with my two cats."),
            event("tool_call", {"tool_name": "lookup", "args": {"q": "Paris"}, "tool_call_id": "c1"}),
            event("agent_response", "Paris is lovely."),
        ]
        await write(client, "s1", events)
        found = await eventually(lambda: facts_of(client), "extracted facts")
        assert sorted(f["text"] for f in found) == ["The user has two cats.", "The user lives in Paris."]
        for fact in found:
            assert fact["origin"] == "extracted"
            assert fact["attribution"] == {"agent": APP, "session_id": "s1", "user_id": "alice"}
            # The conversation's events, not the tool call: that is what the facts were read from.
            assert fact["source_event_ids"] == [events[0]["event_id"], events[2]["event_id"]]
            assert (fact["app_name"], fact["user_id"], fact["session_id"]) == (APP, "alice", "s1")
        [extraction] = requests_of(model, "extract")
        assert extraction["response_format"] == EXTRACTED_FACTS_FORMAT
        assert extraction["model"] == model.model_name
        assert "durable facts about the user" in extraction["messages"][0]["content"]
        assert user_text(extraction) == "user: I live in Paris with my two cats.\nassistant: Paris is lovely."
        assert (await recall(client, "where does the user live"))[0] == "The user lives in Paris."
        await eventually(lambda: idle(client), "the reconcile jobs to finish")


async def test_events_without_conversation_queue_no_extraction(memory_db: str, model: ScriptedModelServer) -> None:
    # No workers: a queued job stays queued for the test to see (a worker could finish it before the listing).
    async with service(memory_db, model, workers="0") as client:
        await write(client, "s1", [event("tool_call", {"tool_name": "t", "args": {}, "tool_call_id": "c1"})])
        # Jobs are queued in the write's own transaction: none now means none ever, for this write.
        assert await jobs(client) == []
        await write(client, "s1", turn("Hello", "Hi"))  # s1 is alice's: only she may write to it
        [queued] = await jobs(client)
        assert (queued["kind"], queued["session_id"]) == ("extract", "s1")


async def test_a_service_without_long_term_memory_extracts_nothing(memory_db: str, model: ScriptedModelServer) -> None:
    async with service(memory_db, model, long_term_enabled="false") as client:
        await write(client, "s1", turn("I live in Paris", "Nice"))
        assert await jobs(client) == []


@pytest.mark.parametrize(
    "answers",
    [
        ["not JSON at all", '{"facts": "one fact, not a list"}', '{"fact": ["ok"]}'],
        [json.dumps({"facts": [f"fact {n}" for n in range(51)]}), '{"facts": ["nul \\u0000 inside"]}', "[]"],
    ],
    ids=["malformed", "unstorable"],
)
async def test_invalid_answers_are_retried_then_the_job_is_failed_with_a_reason(
    memory_db: str, model: ScriptedModelServer, answers: list[str]
) -> None:
    model.enqueue(*answers)
    async with service(memory_db, model, extraction_attempts="3") as client:
        await write(client, "s1", turn("I live in Paris", "Nice"))
        [failed] = await eventually(lambda: jobs(client, "failed"), "the failed extraction")
        assert (failed["kind"], failed["session_id"], failed["app_name"]) == ("extract", "s1", APP)
        assert "3 answers were not valid extracted_facts JSON" in failed["last_error"]
        assert len(requests_of(model, "extract")) == 3
        assert await facts_of(client) == []
        # A failed job stays listed (not silently dropped) and is not queued again.
        assert [job["status"] for job in await jobs(client)] == ["failed"]


async def test_an_unreachable_model_makes_the_job_wait_and_try_again(memory_db: str) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}/v1"
    async with memory_service(service_env(memory_db, **model_env(nowhere), workers="1")) as url:
        async with httpx.AsyncClient(base_url=url, headers=ADMIN, timeout=60.0) as client:
            await write(client, "s1", turn("I live in Paris", "Nice"))

            async def retried() -> dict | None:
                listed = await jobs(client)
                return listed[0] if listed and listed[0]["attempts"] >= 2 else None

            job = await eventually(retried, "a second try of the extraction")
            assert job["status"] == "queued"
            assert nowhere in job["last_error"]
            assert await jobs(client, "failed") == []


async def test_a_model_error_status_is_retried_until_it_answers(memory_db: str, model: ScriptedModelServer) -> None:
    model.enqueue(ErrorReply(503, "overloaded"), facts_reply("The user lives in Paris."))
    model.load_script([NO_CONFLICT])
    async with service(memory_db, model) as client:
        await write(client, "s1", turn("I live in Paris", "Nice"))
        found = await eventually(lambda: facts_of(client), "the fact, after one retry")
        assert [f["text"] for f in found] == ["The user lives in Paris."]
        assert len(requests_of(model, "extract")) == 2
        assert await jobs(client, "failed") == []


# -- long term: duplicates and contradictions -------------------------------------------------------------------


async def test_a_fact_is_kept_once_across_save_and_extraction(memory_db: str, model: ScriptedModelServer) -> None:
    model.load_script(
        [
            extracts(
                "I live in Paris",
                "the user lives in paris",  # the saved fact, in other case and punctuation
                "The user lives in Paris, France.",  # nearly the same words (5 of 6)
                "The user has a cat.",
                "The user has a cat",
            ),
            NO_CONFLICT,
            NO_FACTS,
        ]
    )
    async with service(memory_db, model) as client:
        saved = await save(client, "The user lives in Paris.")
        assert saved["status"] == "stored"
        await write(client, "s1", turn("I live in Paris and have a cat", "Noted"))
        await eventually(lambda: idle(client), "the extraction and its conflict checks")
        found = await facts_of(client)
        assert sorted(f["text"] for f in found) == ["The user has a cat.", "The user lives in Paris."]
        # And the other way round: saving what extraction already stored is a duplicate of it.
        cat = next(f for f in found if "cat" in f["text"])
        assert await save(client, "the user has a cat!", session_id="s2") == {
            "fact_id": cat["fact_id"],
            "status": "duplicate",
        }
        assert len(await facts_of(client)) == 2


async def test_without_embeddings_only_facts_sharing_their_words_get_a_conflict_check(
    memory_db: str, model: ScriptedModelServer
) -> None:
    """Every fact about the user matches "user" in full text; a conflict check (a model request) is made only for a
    new fact sharing at least half of its content words with an older one, and only those are listed to it."""
    model.load_script(
        [
            extracts("I have a dog", "The user has a dog.", "The user likes jazz.", "The user lives in Lyon."),
            NO_CONFLICT,
            NO_FACTS,
        ]
    )
    async with service(memory_db, model) as client:
        await save(client, "The user lives in Paris.")
        await save(client, "The user owns a bicycle.")
        await eventually(lambda: idle(client), "the saves' conflict checks")
        # Neither saved fact shares enough words with the other: no conflict check was asked for.
        assert requests_of(model, "conflict") == []
        await write(client, "s1", turn("I have a dog", "Nice"))
        await eventually(lambda: idle(client), "the extraction and its conflict checks")
        assert len(await facts_of(client)) == 5
        # One extraction; of its 3 new facts only "lives in Lyon" shares words ("lives") with an older fact.
        assert len(requests_of(model, "extract")) == 1
        checks = [user_text(request) for request in requests_of(model, "conflict")]
        assert len(checks) == 1
        assert checks[0].startswith("New fact: The user lives in Lyon.\nExisting facts:\n")
        assert checks[0].endswith(": The user lives in Paris.")


async def test_concurrent_saves_of_one_fact_keep_one(memory_db: str) -> None:
    async with service(memory_db, None, workers="0") as client:
        results = await asyncio.gather(*(save(client, "The user likes green tea.") for _ in range(8)))
        stored = [r for r in results if r["status"] == "stored"]
        assert len(stored) == 1
        assert {r["fact_id"] for r in results} == {stored[0]["fact_id"]}
        assert len(await facts_of(client)) == 1


async def test_a_contradicted_fact_is_superseded_with_its_history(memory_db: str, model: ScriptedModelServer) -> None:
    model.load_script(
        [
            extracts("I moved to Lyon", "The user lives in Lyon."),
            # The conflict check of the Lyon fact names the Paris fact, whatever its id.
            Rule(
                Match(user_matches=r"(?s)^New fact: The user lives in Lyon\..*?(?P<old>fact_\w+): The user lives in "),
                TextReply('{"contradicted": ["{old}"]}'),
            ),
            NO_CONFLICT,
            NO_FACTS,
        ]
    )
    async with service(memory_db, model) as client:
        paris = (await save(client, "The user lives in Paris."))["fact_id"]
        assert await recall(client, "where does the user live") == ["The user lives in Paris."]
        await write(client, "s2", turn("I moved to Lyon last week", "Congratulations"))

        async def superseded() -> dict | None:
            old = next(f for f in await facts_of(client, include_invalid=True) if f["fact_id"] == paris)
            return old if old["invalidated_at"] else None

        old = await eventually(superseded, "the Paris fact superseded")
        lyon = next(f for f in await facts_of(client) if f["text"] == "The user lives in Lyon.")
        assert old["superseded_by"] == lyon["fact_id"]
        assert [f["text"] for f in await facts_of(client)] == ["The user lives in Lyon."]
        assert await recall(client, "where does the user live") == ["The user lives in Lyon."]
        [check] = requests_of(model, "conflict")
        assert check["response_format"]["json_schema"]["name"] == "fact_conflicts"
        assert user_text(check).startswith("New fact: The user lives in Lyon.\nExisting facts:\n")
        history = (await client.get(f"/v1/facts/{paris}/history")).json()["history"]
        assert [entry["action"] for entry in history] == ["created", "superseded"]
        assert history[1]["old_text"] == "The user lives in Paris."
        assert history[1]["new_text"] == "The user lives in Lyon."
        assert history[1]["new_fact_id"] == lyon["fact_id"]
        assert "contradicted" in history[1]["reason"]
        missing = await client.get("/v1/facts/fact_nope/history")
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] == "not_found"


# -- medium term: rolling summaries -----------------------------------------------------------------------------

#: A fold's answer names the last turn it read, so the test can tell which events each version covers.
FOLD = Rule(Match(user_matches=r"(?s)Conversation:\n.*assistant: answer (?P<n>\d+)"), TextReply("Summary to {n}."))


def numbered_turn(n: int) -> list[dict[str, object]]:
    return turn(f"turn {n} question", f"answer {n}")


async def summaries(memory_db: str) -> list[tuple[int, str]]:
    async with await psycopg.AsyncConnection.connect(memory_db) as conn:
        cur = await conn.execute("SELECT version, body FROM summaries ORDER BY version")
        return [(int(row[0]), str(row[1])) for row in await cur.fetchall()]


async def test_folds_make_versioned_summaries_within_digest_retention(
    memory_db: str, model: ScriptedModelServer
) -> None:
    model.load_script([FOLD])
    settings = {"short_term_hard_event_cap": "4", "compaction_trigger": "2", "digest_retention": "2"}
    async with service(memory_db, model, long_term_enabled="false", **settings) as client:

        async def context() -> dict:
            body = {"app_name": APP, "user_id": "alice", "max_events": 10}
            response = await client.post("/v1/sessions/s1/context", json=body)
            assert response.status_code == 200, response.text
            return response.json()

        for n in (1, 2):
            await write(client, "s1", numbered_turn(n), rolling_summary=True)
        assert await jobs(client) == []  # 4 events: all within the window
        for n, expected in ((3, "Summary to 1."), (4, "Summary to 2."), (5, "Summary to 3.")):
            await write(client, "s1", numbered_turn(n), rolling_summary=True)

            async def summarised(expected: str = expected) -> dict | None:
                got = await context()
                return got if got["summary"] == expected else None

            got = await eventually(summarised, f"summary {expected!r}")
            # The window is the store's (4 events, under the client's 10): the two newest turns.
            assert [e["content"] for e in got["window"]] == [
                f"turn {n - 1} question",
                f"answer {n - 1}",
                f"turn {n} question",
                f"answer {n}",
            ]
        assert await summaries(memory_db) == [(2, "Summary to 2."), (3, "Summary to 3.")]
        folds = requests_of(model, "fold")
        assert [user_text(r) for r in folds[:2]] == [
            "Conversation:\nuser: turn 1 question\nassistant: answer 1",
            "Previous summary:\nSummary to 1.\n\nConversation:\nuser: turn 2 question\nassistant: answer 2",
        ]
        assert folds[0]["messages"][0]["content"].startswith("Summarize")
        assert "response_format" not in folds[0]


async def test_a_backlog_is_folded_oldest_first_in_batches(memory_db: str, model: ScriptedModelServer) -> None:
    """A write of 126 turns leaves 248 events out of a 4-event window: two folds (200, then 48 events), in order,
    each building on the last, so no event is skipped."""
    model.load_script([FOLD])
    settings = {"short_term_hard_event_cap": "4", "compaction_trigger": "2"}
    async with service(memory_db, model, long_term_enabled="false", **settings) as client:
        await write(client, "s1", [e for n in range(1, 127) for e in numbered_turn(n)], rolling_summary=True)
        await eventually(lambda: idle(client), "the fold")
        first, second = (user_text(r) for r in requests_of(model, "fold"))
        assert first.startswith("Conversation:\nuser: turn 1 question\n")
        assert first.endswith("\nassistant: answer 100")
        assert second.startswith("Previous summary:\nSummary to 100.\n\nConversation:\nuser: turn 101 question\n")
        assert second.endswith("\nassistant: answer 124")
        assert await summaries(memory_db) == [(1, "Summary to 100."), (2, "Summary to 124.")]


async def test_two_replicas_never_fold_one_session_at_once(memory_db: str, model: ScriptedModelServer) -> None:
    # The fold takes a few seconds, so that the other replica's worker comes by while it runs.
    model.load_script([Rule(Match(user_matches="Conversation:"), TextReply("Folded.", delay_seconds=3.0))])
    settings = {"short_term_hard_event_cap": "2", "long_term_enabled": "false"}
    async with service(memory_db, model, **settings) as first, service(memory_db, model, **settings) as second:
        await write(first, "s1", [e for n in range(1, 4) for e in numbered_turn(n)])
        assert await jobs(first) == []  # no rolling summary asked for: no fold queued by the write
        async with await psycopg.AsyncConnection.connect(memory_db, autocommit=True) as conn:
            # Two fold jobs for one session, as two replicas could queue them at the same moment.
            await conn.execute("INSERT INTO jobs (kind, sid) SELECT 'fold', sid FROM sessions, generate_series(1, 2)")

        async def turned_away() -> list[dict]:
            return [j for j in await jobs(second) if "another replica is folding" in (j["last_error"] or "")]

        await eventually(turned_away, "the second fold turned away while the first runs")
        await eventually(lambda: idle(first), "both folds done")
        assert len(requests_of(model, "fold")) == 1
        assert await summaries(memory_db) == [(1, "Folded.")]


# -- erasure ----------------------------------------------------------------------------------------------------


class HeldModel:
    """The scripted model behind a gate the test holds: a chat request waits at the gate (``arrived`` is set) until
    the test opens it (``gate``); only then does the scripted model see and answer it."""

    def __init__(self, model: ScriptedModel) -> None:
        self.model = model
        self.app = create_model_app(model)
        self.arrived = threading.Event()
        self.gate = threading.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].endswith("/chat/completions"):
            self.arrived.set()
            await asyncio.to_thread(self.gate.wait, 60.0)
        await self.app(scope, receive, send)


@pytest.mark.parametrize("key", ["user_id", "session_id"])
async def test_forget_returns_while_an_extraction_waits_on_the_model_and_its_facts_are_dropped(
    memory_db: str, key: str
) -> None:
    scripted = ScriptedModel()
    scripted.load_script([extracts("I live in Paris", "The user lives in Paris."), NO_CONFLICT])
    held = HeldModel(scripted)
    async with ThreadedServer(held, name="held-model", lifespan="off") as model_server:
        env = service_env(memory_db, workers="1", **model_env(f"{model_server.root_url}/v1"))
        async with memory_service(env) as url, httpx.AsyncClient(base_url=url, headers=ADMIN, timeout=60.0) as client:
            await write(client, "s1", turn("I live in Paris", "Nice"))
            await write(
                client, "other", [event("tool_call", {"tool_name": "t", "args": {}, "tool_call_id": "c"})], "bob"
            )
            # The extraction's model request is in flight, held at the gate, when the erasure comes.
            assert await asyncio.to_thread(held.arrived.wait, 30.0)
            response = await client.post("/v1/forget", json={key: "alice" if key == "user_id" else "s1"})
            assert response.status_code == 200, response.text
            # The erasure answered while the model request is still held at the gate (the model has not seen it).
            assert scripted.requests == []
            removed = response.json()["removed"]
            assert {tier: removed[tier] for tier in ("sessions", "events", "facts", "jobs")} == {
                "sessions": 1,
                "events": 2,
                "facts": 0,
                "jobs": 1,
            }
            held.gate.set()
            # The model answers; the job's commit finds its session gone and drops the fact.
            assert await asyncio.to_thread(scripted.wait_for_requests, 1, 30.0)
            await eventually(lambda: idle(client), "the extraction's end")
            assert await recall(client, "where does the user live") == []
            assert await facts_of(client, include_invalid=True) == []
            kept = (await client.get("/v1/sessions/other/events", params={"app_name": APP})).json()
            assert kept["total"] == 1


async def test_forget_removes_queued_jobs_and_counts_every_tier(memory_db: str, model: ScriptedModelServer) -> None:
    settings = {"short_term_hard_event_cap": "2", "compaction_trigger": "2"}
    # No worker yet: every job stays queued.
    async with service(memory_db, model, workers="0", **settings) as client:
        await write(
            client, "s1", [*turn("I live in Paris", "Nice"), *turn("And I code", "Great")], rolling_summary=True
        )
        await save(client, "The user writes code.")
        await write(client, "s2", turn("I live in Oslo", "Cold"), user="bob")
        assert sorted(j["kind"] for j in await jobs(client)) == ["extract", "extract", "fold", "reconcile"]
        response = await client.post("/v1/forget", json={"session_id": "s1"})
        assert response.json()["removed"] == {
            "sessions": 1,
            "events": 4,
            "summaries": 0,
            "facts": 1,
            "fact_history": 1,
            "jobs": 3,
        }
        assert [(j["kind"], j["session_id"]) for j in await jobs(client)] == [("extract", "s2")]
    # Workers come: bob's extraction runs, and nothing of s1 does.
    model.load_script([extracts("I live in Oslo", "The user lives in Oslo."), NO_CONFLICT])
    async with service(memory_db, model, **settings) as client:
        await eventually(lambda: idle(client), "bob's extraction")
        assert [f["text"] for f in await facts_of(client, "bob")] == ["The user lives in Oslo."]
        assert await facts_of(client) == []
        assert [r for r in model.requests if "Paris" in user_text(r)] == []


# -- corrections: near duplicates that say something else ----------------------------------------------------

#: (older, newer, what differs: None for a true duplicate).
CORRECTIONS = [
    ("The user is allergic to peanuts.", "The user is not allergic to peanuts.", "negation"),
    ("Alice owes Bob 50 dollars.", "Bob owes Alice 50 dollars.", "swapped roles"),
    ("The user's daughter Emma is 7 years old.", "The user's daughter Emma is 8 years old.", "number"),
    (
        "The user's dentist appointment is on Monday at 3pm in Lyon.",
        "The user's dentist appointment is on Tuesday at 3pm in Lyon.",
        "date or time",
    ),
    ("The user keeps three bees in Lyon.", "The user keeps three bees in Lyon now.", None),
    ("The user likes green tea.", "the user likes green tea!", None),
]


async def save_without_session(client: httpx.AsyncClient, content: str, user: str) -> dict:
    response = await client.post("/v1/facts", json={"content": content, "app_name": APP, "user_id": user})
    assert response.status_code == 200, response.text
    return response.json()


async def test_without_a_model_a_correction_supersedes_the_older_fact_and_a_duplicate_is_kept_once(
    memory_db: str,
) -> None:
    async with service(memory_db, None) as client:
        for index, (older, newer, differs) in enumerate(CORRECTIONS):
            user = f"user{index}"
            first = await save_without_session(client, older, user)
            second = await save(client, newer, session_id=f"s{index}", user=user)
            if differs is None:
                assert second == {"fact_id": first["fact_id"], "status": "duplicate"}, newer
                assert [f["text"] for f in await facts_of(client, user)] == [older]
                continue
            assert second["status"] == "stored", newer
            # The newer fact is the valid one; the older is superseded by it, with history saying why.
            assert [f["text"] for f in await facts_of(client, user)] == [newer]
            old = next(f for f in await facts_of(client, user, include_invalid=True) if f["text"] == older)
            assert old["superseded_by"] == second["fact_id"], old
            assert old["invalidated_at"], old
            history = (await client.get(f"/v1/facts/{first['fact_id']}/history")).json()["history"]
            assert [entry["action"] for entry in history] == ["created", "superseded"]
            assert history[1]["reason"] == f"corrected ({differs}) by a newer fact"
            assert (history[1]["old_text"], history[1]["new_text"]) == (older, newer)


async def test_with_a_model_every_correction_goes_to_the_conflict_check_with_or_without_a_session(
    memory_db: str, model: ScriptedModelServer
) -> None:
    model.load_script(
        [
            # The conflict check says the first fact it is shown is contradicted.
            Rule(
                Match(user_matches=r"(?s)^New fact: .*?(?P<old>fact_\w+): "), TextReply('{"contradicted": ["{old}"]}')
            ),
            NO_FACTS,
        ]
    )
    async with service(memory_db, model) as client:
        for index, (older, newer, differs) in enumerate(CORRECTIONS):
            user = f"user{index}"
            first = await save_without_session(client, older, user)
            second = await save_without_session(client, newer, user)
            await eventually(lambda: idle(client), "the conflict checks")
            if differs is None:
                assert second["status"] == "duplicate", newer
                continue
            assert second["status"] == "stored", newer
            # Not superseded at the write: the model judged it (a check naming the older fact), then it was.
            checks = [user_text(r) for r in requests_of(model, "conflict") if f"New fact: {newer}" in user_text(r)]
            assert len(checks) == 1, checks
            assert first["fact_id"] in checks[0], checks
            assert [f["text"] for f in await facts_of(client, user)] == [newer]
            history = (await client.get(f"/v1/facts/{first['fact_id']}/history")).json()["history"]
            assert history[-1]["reason"] == "contradicted by a newer fact"


# -- ranking: relevance first, age only breaks ties ---------------------------------------------------------


async def test_an_old_relevant_fact_outranks_a_new_less_relevant_one_and_age_breaks_ties(memory_db: str) -> None:
    async with service(memory_db, None) as client:
        old = (await save(client, "The user lives in Lyon with a dog."))["fact_id"]
        await save(client, "The user lives in Lyon.")
        tied_old = (await save(client, "The user plays chess."))["fact_id"]
        await save(client, "The user plays tennis.")
        async with await psycopg.AsyncConnection.connect(memory_db) as conn:
            await conn.execute(
                "UPDATE facts SET created_at = now() - interval '365 days' WHERE fact_id = ANY(%s)",
                ([old, tied_old],),
            )
            await conn.commit()
        # All four query words against three of them: a year of age does not bury the better match.
        assert (await recall(client, "user lives Lyon dog"))[:2] == [
            "The user lives in Lyon with a dog.",
            "The user lives in Lyon.",
        ]
        # Equal relevance: the newer first.
        assert (await recall(client, "what does the user play"))[:2] == [
            "The user plays tennis.",
            "The user plays chess.",
        ]
