"""The web console (``kora console``'s app) against real workloads on 127.0.0.1: a state directory as ``kora up``
writes it (state and credentials), a real agent with the scripted model, a real memory service on Postgres. The
pages are read as HTML; the browser tests (tests/e2e/test_console_browser.py) drive them in Chromium."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from kora.console.app import create_app
from kora.console.settings import load_console_settings
from kora.local.state import READY, WAITING, UpState, WorkloadState, write_state
from kora.resources.graph import ResourceRef
from kora.resources.wiring import ADMIN_TOKEN_KEY, credentials_secret
from tests.support.agent import OPERATOR_TOKEN, served_agent
from tests.support.memory import ADMIN, ADMIN_TOKEN, memory_service, service_env
from tests.support.scripted_server import ScriptedModelServer
from tests.support.threaded import ThreadedServer


@dataclass
class Run:
    """A state directory as ``kora up`` leaves it, and the console serving it."""

    state_dir: Path
    url: str

    def get(self, path: str, **params: str) -> httpx.Response:
        return httpx.get(f"{self.url}{path}", params=params, timeout=30)


def workload(kind: str, name: str, direct_url: str, phase: str = READY, message: str = "") -> WorkloadState:
    return WorkloadState(
        name=name,
        kind=kind,
        namespace="default",
        gateway_url=f"http://127.0.0.1:8080/default/{kind.lower()}/{name}",
        direct_url=direct_url,
        log="/dev/null",
        phase=phase,
        message=message,
    )


def write_run(state_dir: Path, workloads: list[WorkloadState], tokens: dict[tuple[str, str], str]) -> None:
    """``state.json`` with ``workloads`` and ``credentials.json`` with each ``(kind, name)``'s operator token."""
    write_state(
        state_dir, UpState(pid=1, gateway_url="http://127.0.0.1:8080", started_at=time.time(), workloads=workloads)
    )
    credentials = {
        f"default/{credentials_secret(ResourceRef(kind, 'default', name))}/{ADMIN_TOKEN_KEY}": token
        for (kind, name), token in tokens.items()
    }
    (state_dir / "credentials.json").write_text(json.dumps(credentials), encoding="utf-8")


@pytest.fixture
def console(tmp_path: Path) -> Iterator[Run]:
    settings = load_console_settings({"CONSOLE_STATE_DIR": str(tmp_path)})
    with ThreadedServer(create_app(settings), name="console", lifespan="on") as server:
        yield Run(tmp_path, server.root_url)


def test_without_a_kora_up_run_every_page_says_how_to_start_one(console):
    for path in ("/", "/chat", "/sessions", "/memory"):
        page = console.get(path)
        assert page.status_code == 200
        assert 'role="alert"' in page.text
        assert "No kora up run found" in page.text
        assert "kora up examples/quickstart" in page.text
    assert console.get("/api/state").json()["resources"] == []
    assert console.get("/ready").status_code == 200


def test_the_graph_shows_each_resource_with_its_phase_and_message(console):
    write_run(
        console.state_dir,
        [
            workload("ModelAPI", "scripted", "http://127.0.0.1:9"),
            workload("Agent", "assistant", "http://127.0.0.1:9", WAITING, "waiting for MCPServer/tools (Waiting)"),
        ],
        {},
    )
    page = console.get("/").text
    assert "<td>scripted</td>" in page
    assert "<td>assistant</td>" in page
    assert ">Waiting</span>" in page
    assert ">Ready</span>" in page
    assert "waiting for MCPServer/tools (Waiting)" in page
    state = console.get("/api/state").json()
    assert [(r["name"], r["phase"]) for r in state["resources"]] == [("scripted", "Ready"), ("assistant", "Waiting")]
    assert state["resources"][1]["gateway_path"] == "/default/agent/assistant"


def test_chat_sessions_and_a_session_timeline_of_a_real_agent(console):
    with ScriptedModelServer() as model, served_agent(model, "assistant") as agent:
        write_run(
            console.state_dir, [workload("Agent", "assistant", agent.url)], {("Agent", "assistant"): OPERATOR_TOKEN}
        )
        chat = console.get("/chat").text
        assert '<label for="message">Message</label>' in chat
        assert '<button type="submit">Send</button>' in chat
        assert 'data-endpoint="/default/agent/assistant/ag-ui"' in chat

        assert "No sessions yet" in console.get("/sessions").text
        thread = f"console-{uuid.uuid4().hex[:8]}"
        body = {"threadId": thread, "runId": "r", "messages": [{"id": "m", "role": "user", "content": "hello console"}]}
        assert httpx.post(f"{agent.url}/ag-ui", json=body, timeout=60).status_code == 200

        sessions = console.get("/sessions", agent="default/assistant").text
        assert f">{thread}</a>" in sessions
        timeline = console.get(f"/sessions/default/assistant/{thread}").text
        assert "user_message" in timeline
        assert "hello console" in timeline
        assert "agent_response" in timeline
        assert "You said: hello console" in timeline


def test_an_agent_that_does_not_answer_or_refuses_the_token_is_an_error_saying_what_to_do(console):
    write_run(console.state_dir, [workload("Agent", "gone", "http://127.0.0.1:9")], {("Agent", "gone"): "t"})
    page = console.get("/sessions").text
    assert 'role="alert"' in page
    assert "Agent/gone did not answer" in page
    assert "kora logs gone" in page
    with ScriptedModelServer() as model, served_agent(model, "assistant") as agent:
        write_run(console.state_dir, [workload("Agent", "assistant", agent.url)], {("Agent", "assistant"): "wrong"})
        assert "Agent/assistant answered 401" in console.get("/sessions").text
        write_run(console.state_dir, [workload("Agent", "assistant", agent.url)], {})
        assert "has no operator token yet" in console.get("/sessions").text


async def test_memory_shows_facts_per_user_and_erases_a_user_after_confirmation(console, memory_db):
    async with memory_service(service_env(memory_db)) as store_url:
        async with httpx.AsyncClient(base_url=store_url, headers=ADMIN, timeout=30) as store:
            for user, text in (("alice", "alice likes tea"), ("bob", "bob likes coffee")):
                saved = await store.post("/v1/facts", json={"content": text, "app_name": "assistant", "user_id": user})
                assert saved.status_code == 200, saved.text
        write_run(
            console.state_dir,
            [workload("MemoryStore", "memory", store_url)],
            {("MemoryStore", "memory"): ADMIN_TOKEN},
        )
        async with httpx.AsyncClient(base_url=console.url, timeout=30) as browser:
            page = (await browser.get("/memory")).text
            assert "alice likes tea" in page
            assert "bob likes coffee" in page
            assert "saved by assistant" in page
            confirm = await browser.get("/memory/erase", params={"store": "default/memory", "user": "alice"})
            assert "This cannot be undone" in confirm.text
            assert "alice likes tea" in (await browser.get("/memory")).text  # nothing erased before the POST

            form = {"store": "default/memory", "user": "alice"}
            refused = await browser.post("/memory/erase", data=form, headers={"Sec-Fetch-Site": "cross-site"})
            assert refused.status_code == 403
            assert "alice likes tea" in (await browser.get("/memory")).text

            erased = await browser.post("/memory/erase", data=form, headers={"Sec-Fetch-Site": "same-origin"})
            assert erased.status_code == 303
            after = (await browser.get(erased.headers["location"])).text
            assert "Erased every memory of user alice" in after
            assert "alice likes tea" not in after
            assert "bob likes coffee" in after
