"""The web console (``kora console``'s app) against real workloads on 127.0.0.1: a state directory as ``kora up``
writes it (state and credentials), a real agent with the scripted model, a real memory service on Postgres. The
pages are read as HTML; the browser tests (tests/e2e/test_console_browser.py) drive them in Chromium."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kora.console.app import create_app
from kora.console.settings import load_console_settings
from kora.core.errors import SourceError
from kora.local.state import READY, WAITING, UpState, WorkloadState, write_state
from kora.resources.graph import ResourceRef
from kora.resources.wiring import ADMIN_TOKEN_KEY, credentials_secret
from kora.scripted import ToolCall, ToolCallReply
from tests.support.agent import OPERATOR, OPERATOR_TOKEN, mcp_app, served_agent
from tests.support.memory import ADMIN, ADMIN_TOKEN, memory_service, service_env
from tests.support.scripted_server import ScriptedModelServer
from tests.support.threaded import ThreadedServer

pytestmark = pytest.mark.integration

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart" / "kora.yaml"


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
    for path in ("/", "/chat", "/sessions", "/approvals", "/memory"):
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
        # Without tracing no turn has a trace id: none is shown, and the chat's question says so.
        assert "Trace of this turn" not in timeline
        trace = console.get(f"/api/sessions/default/assistant/{thread}/trace")
        assert trace.json() == {"trace_id": None, "url": None}


def test_an_agent_that_does_not_answer_or_refuses_the_token_is_an_error_saying_what_to_do(console):
    write_run(console.state_dir, [workload("Agent", "gone", "http://127.0.0.1:9")], {("Agent", "gone"): "t"})
    page = console.get("/sessions").text
    assert 'role="alert"' in page
    assert "Agent/gone did not answer" in page
    assert "kora logs gone" in page
    trace = console.get("/api/sessions/default/gone/s-1/trace")
    assert trace.status_code == 502
    assert "Agent/gone did not answer" in trace.json()["detail"]
    with ScriptedModelServer() as model, served_agent(model, "assistant") as agent:
        write_run(console.state_dir, [workload("Agent", "assistant", agent.url)], {("Agent", "assistant"): "wrong"})
        assert "Agent/assistant answered 401" in console.get("/sessions").text
        write_run(console.state_dir, [workload("Agent", "assistant", agent.url)], {})
        assert "has no operator token yet" in console.get("/sessions").text


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def test_approvals_lists_each_waiting_call_and_approves_or_rejects_it_through_the_agent(console):
    with (
        ScriptedModelServer() as model,
        ThreadedServer(mcp_app("calc", [add]), name="calc", lifespan="on") as calc,
        served_agent(
            model, "assistant", TOOL_APPROVAL_REQUIRED="calc/add", MCP_SERVERS="calc", MCP_SERVER_CALC_URL=calc.root_url
        ) as agent,
    ):
        write_run(
            console.state_dir, [workload("Agent", "assistant", agent.url)], {("Agent", "assistant"): OPERATOR_TOKEN}
        )
        page = console.get("/approvals").text
        assert 'href="/approvals" aria-current="page">Approvals</a>' in page
        assert "No tool call waits for approval" in page

        def paused_call(thread: str) -> str:
            body = {"threadId": thread, "runId": "r", "messages": [{"id": "m", "role": "user", "content": "add"}]}
            assert httpx.post(f"{agent.url}/ag-ui", json=body, timeout=60).status_code == 200
            page = console.get("/approvals").text
            assert '<strong class="tool">add</strong>' in page
            assert f">{thread}</a>" in page
            assert '"a": 1' in page
            (approval,) = httpx.get(f"{agent.url}/approvals", headers=OPERATOR, timeout=30).json()["approvals"]
            assert f'value="{approval["id"]}"' in page
            return str(approval["id"])

        def decide(form: dict[str, str], site: str | None = "same-origin") -> httpx.Response:
            headers = {"Sec-Fetch-Site": site} if site else {}
            return httpx.post(f"{console.url}/approvals/decide", data=form, headers=headers, timeout=60)

        model.enqueue(ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]), "The sum is 3.")
        approved = paused_call("console-approve")
        form = {"agent": "default/assistant", "id": approved, "decision": "approve"}
        # Another site, or a client that is no browser while no access token is set, decides nothing.
        assert decide(form, "cross-site").status_code == 403
        assert decide(form, None).status_code == 403
        assert decide({**form, "decision": "maybe"}).status_code == 400
        assert f'value="{approved}"' in console.get("/approvals").text
        answer = decide(form)
        assert answer.status_code == 303
        after = httpx.get(console.url + answer.headers["location"], timeout=30).text
        assert f"Approved the call {approved} of default/assistant: the turn went on and ended" in after
        assert "No tool call waits for approval" in after
        assert "The sum is 3." in console.get("/sessions/default/assistant/console-approve").text
        again = decide(form)
        assert again.status_code == 502
        assert f"The call {approved} was not decided: Agent/assistant answered 409" in again.text

        model.enqueue(ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]), "I was not allowed to add.")
        rejected = paused_call("console-reject")
        answer = decide({"agent": "default/assistant", "id": rejected, "decision": "reject", "reason": "not today"})
        assert answer.status_code == 303
        assert f"Rejected the call {rejected}" in httpx.get(console.url + answer.headers["location"], timeout=30).text
        assert "not today" in json.dumps(model.requests[-1])
        assert "I was not allowed to add." in console.get("/sessions/default/assistant/console-reject").text


def test_approvals_of_an_agent_that_does_not_answer_say_what_to_do(console):
    write_run(console.state_dir, [workload("Agent", "gone", "http://127.0.0.1:9")], {("Agent", "gone"): "t"})
    page = console.get("/approvals").text
    assert 'role="alert"' in page
    assert "Agent/gone did not answer" in page
    assert "kora logs gone" in page


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
            # No browser (no Sec-Fetch-Site) and no access token configured: any local process could erase.
            headless = await browser.post("/memory/erase", data=form)
            assert headless.status_code == 403
            assert "Sec-Fetch-Site" in headless.json()["detail"]
            assert "alice likes tea" in (await browser.get("/memory")).text

            erased = await browser.post("/memory/erase", data=form, headers={"Sec-Fetch-Site": "same-origin"})
            assert erased.status_code == 303
            after = (await browser.get(erased.headers["location"])).text
            assert "Erased every memory of user alice" in after
            assert "alice likes tea" not in after
            assert "bob likes coffee" in after


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A console with ``CONSOLE_ACCESS_TOKEN=s3cret`` (and no kora up run); its URL."""
    state_dir = tmp_path_factory.mktemp("guarded")
    settings = load_console_settings({"CONSOLE_STATE_DIR": str(state_dir), "CONSOLE_ACCESS_TOKEN": "s3cret"})
    with ThreadedServer(create_app(settings), name="console", lifespan="on") as server:
        yield server.root_url


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.mark.parametrize(
    "path", ["/", "/api/state", "/chat", "/sessions", "/approvals", "/memory", "/assets/console.js"]
)
def test_with_an_access_token_every_page_asks_for_it_and_shows_nothing_without_it(guarded: str, path: str):
    refused = httpx.get(f"{guarded}{path}", timeout=30)
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"] == 'Basic realm="Kora console", charset="UTF-8"'
    assert "access token" in refused.json()["detail"]
    for header in (_basic("anyone", "s3cret"), _basic("", "s3cret"), "Bearer s3cret"):
        assert httpx.get(f"{guarded}{path}", headers={"Authorization": header}, timeout=30).status_code == 200


def test_the_probes_answer_without_the_access_token(guarded: str):
    for path in ("/health", "/ready"):
        assert httpx.get(f"{guarded}{path}", timeout=30).status_code == 200


def test_an_erasure_without_the_access_token_is_refused_before_anything_is_read(guarded: str):
    answer = httpx.post(f"{guarded}/memory/erase", data={"store": "default/mem", "user": "ana"}, timeout=30)
    assert answer.status_code == 401


def test_a_decision_without_the_access_token_is_refused_before_anything_is_read(guarded: str):
    form = {"agent": "default/assistant", "id": "appr_x", "decision": "approve"}
    headers = {"Sec-Fetch-Site": "same-origin"}
    assert httpx.post(f"{guarded}/approvals/decide", data=form, headers=headers, timeout=30).status_code == 401


def test_with_the_access_token_a_client_that_is_no_browser_may_erase(guarded: str):
    # No Sec-Fetch-Site, but the token: the erasure runs (and fails only because this console has no kora up run).
    answer = httpx.post(
        f"{guarded}/memory/erase",
        data={"store": "default/mem", "user": "ana"},
        headers={"Authorization": "Bearer s3cret"},
        timeout=30,
    )
    assert answer.status_code == 502
    assert 'role="alert"' in answer.text


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    header=st.one_of(
        st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=60),
        st.tuples(st.text(alphabet="abc:", max_size=5), st.text(alphabet="s3cretX:", max_size=8)).map(
            lambda pair: _basic(*pair)
        ),
        st.text(alphabet="s3cretX", min_size=1, max_size=8).map(lambda token: f"Bearer {token}"),
    )
)
def test_any_other_authorization_is_a_401_never_an_error(guarded: str, header: str):
    # Header values a client can send (no surrounding blanks); only the token itself, either way, opens.
    answer = httpx.get(f"{guarded}/api/state", headers={"Authorization": header}, timeout=30)
    basic_password = None
    if header.startswith("Basic "):
        basic_password = base64.b64decode(header[6:]).decode().partition(":")[2]
    opens = header == "Bearer s3cret" or basic_password == "s3cret"
    assert answer.status_code == (200 if opens else 401), header


def test_kora_console_on_a_cluster_without_credentials_says_so_and_exits_2(tmp_path: Path):
    environment = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "CONSOLE_SOURCE": "kubernetes",
        "KUBECONFIG": str(tmp_path / "absent"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "kora.cli", "console"], env=environment, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.startswith("kora console: CONSOLE_SOURCE=kubernetes: no Kubernetes credentials"), done.stderr
    assert "Traceback" not in done.stderr


def test_kora_console_refuses_an_unknown_source(tmp_path: Path):
    environment = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "CONSOLE_SOURCE": "cloud"}
    done = subprocess.run(
        [sys.executable, "-m", "kora.cli", "console"], env=environment, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "CONSOLE_SOURCE" in done.stderr, done.stderr


@pytest.mark.slow
async def test_on_a_cluster_every_namespace_is_read_with_each_agents_status_conditions_and_links(kube_cluster):
    # No operator here: the test writes the status an operator would (a Waiting agent and its conditions), and
    # the credentials Secret it would make.
    from lightkube.resources.core_v1 import Secret
    from lightkube.types import PatchType

    from kora.console.cluster import ClusterSources
    from tests.support.kube import kora_resource

    first, second = kube_cluster.fresh_namespace("console"), kube_cluster.fresh_namespace("console")
    for namespace in (first, second):
        kube_cluster.kubectl("apply", "-n", namespace, "-f", str(QUICKSTART))
    waiting = {
        "phase": "Waiting",
        "message": "waiting for MCPServer tools (Pending)",
        "conditions": [
            {"type": "Ready", "status": "False", "reason": "DependenciesNotReady", "message": "MCPServer tools"},
        ],
    }
    with kube_cluster.client() as client:
        client.patch(
            kora_resource("Agent").Status,
            "assistant",
            {"status": waiting},
            namespace=second,
            patch_type=PatchType.MERGE,
        )
        client.create(
            Secret.from_dict(
                {
                    "metadata": {"name": "agent-assistant-credentials", "namespace": second},
                    "stringData": {ADMIN_TOKEN_KEY: "op-token"},
                }
            )
        )
    async with httpx.AsyncClient() as http, ClusterSources.connect(http, (), kube_cluster.config()) as sources:
        resources = [r for r in await sources.resources() if r.namespace in (first, second)]
        # Listed kind by kind, each kind in the API server's order (by namespace, then name).
        in_order = sorted((first, second))
        assert [(r.kind, r.namespace) for r in resources] == [
            (kind, namespace) for kind in ("ModelAPI", "MCPServer", "Agent") for namespace in in_order
        ]
        agents = {r.namespace: r for r in resources if r.kind == "Agent"}
        fresh, held = agents[first], agents[second]
        assert (fresh.phase, fresh.message, fresh.conditions) == ("Pending", "", ())
        assert (held.phase, held.message) == ("Waiting", "waiting for MCPServer tools (Pending)")
        assert [(c.type, c.status, c.reason, c.message) for c in held.conditions] == [
            ("Ready", "False", "DependenciesNotReady", "MCPServer tools")
        ]
        assert [(link.relation, link.name) for link in held.links] == [("model", "scripted"), ("tools", "tools")]
        assert held.direct_url == f"http://agent-assistant.{second}.svc.cluster.local:8000"
        assert await sources.token(held) == "op-token"
        with pytest.raises(SourceError, match="has no credentials Secret agent-assistant-credentials yet"):
            await sources.token(fresh)
        only = ClusterSources(http, sources._kube, [second])
        assert {r.namespace for r in await only.resources()} == {second}
