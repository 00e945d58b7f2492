"""The web console in a real browser: Debian's Chromium, headless, driven by Playwright, against ``kora up`` of
the examples. Each test saves screenshots of the pages it visits into docs/images/ (shown in docs/console.md).

Chromium comes from Debian's package (``/usr/bin/chromium``; ``.ci/run`` and ``scripts/bootstrap-browser.sh``
install it): Playwright never downloads a browser here. Without it the tests are skipped with the install
command, except under CI, where that fails.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.test_kora_up import Up, start_up, stop
from tests.support.otlp import OtlpReceiver

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CHROMIUM = Path("/usr/bin/chromium")
#: Offline and as root: no sandbox, no GPU, no network of its own (updates, sync, QUIC probes).
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
#: Milliseconds Playwright waits for what a page should show (a loaded 2-core machine).
WAIT_MS = 60_000


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if not CHROMIUM.exists():
        message = "no /usr/bin/chromium: apt-get install chromium (bash scripts/bootstrap-browser.sh)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import expect, sync_playwright

    # Assertions wait as long as page actions do (the default is 5 s).
    expect.set_options(timeout=WAIT_MS)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        yield launched
        launched.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.set_default_timeout(WAIT_MS)
    opened = context.new_page()
    yield opened
    context.close()


def shot(page, name: str) -> None:
    IMAGES.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(IMAGES / f"{name}.png"), full_page=True)


def test_quickstart_graph_chat_with_a_tool_call_and_its_session(tmp_path: Path, page):
    from playwright.sync_api import expect

    up: Up = start_up("examples/quickstart", tmp_path)
    try:
        up.all_ready()
        page.goto(f"{up.gateway}/")
        graph = page.locator("#graph")
        for name in ("scripted", "tools", "assistant"):
            row = graph.locator("tr", has=page.get_by_role("cell", name=name, exact=True))
            expect(row.get_by_text("Ready", exact=True)).to_be_visible()
        shot(page, "console-graph")

        page.get_by_role("link", name="Chat").click()
        page.get_by_label("Message").fill("what is 2 plus 3")
        page.get_by_role("button", name="Send").click()
        transcript = page.locator("#transcript")
        expect(transcript.locator(".turn.tool")).to_contain_text("add")
        expect(transcript.locator(".turn.tool")).to_contain_text("Result: 5")
        expect(transcript.locator(".turn.assistant")).to_have_text("Agent2 plus 3 is 5.")
        expect(page.get_by_role("status")).to_have_text("Done.")
        thread = page.locator("#thread").inner_text()
        shot(page, "console-chat")

        page.get_by_role("link", name="Sessions").click()
        expect(page.get_by_role("link", name=thread)).to_be_visible()
        shot(page, "console-sessions")
        page.get_by_role("link", name=thread).click()
        timeline = page.locator(".timeline")
        for kind in ("user_message", "tool_call", "tool_result", "agent_response"):
            expect(timeline.get_by_text(kind, exact=True)).to_be_visible()
        shot(page, "console-session")

        # Keyboard only: the skip link comes first, then the navigation.
        page.goto(f"{up.gateway}/")
        page.keyboard.press("Tab")
        expect(page.get_by_role("link", name="Skip to content")).to_be_focused()
        page.keyboard.press("Tab")
        page.keyboard.press("Tab")
        expect(page.get_by_role("link", name="Chat")).to_be_focused()
        page.keyboard.press("Enter")
        expect(page.get_by_label("Message")).to_be_visible()

        # A phone's width: nothing wider than the screen.
        page.set_viewport_size({"width": 390, "height": 844})
        page.goto(f"{up.gateway}/")
        expect(page.get_by_role("cell", name="assistant", exact=True)).to_be_visible()
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        shot(page, "console-graph-narrow")
    finally:
        stop(up)


def test_memory_example_fact_shows_and_is_gone_after_erasing_its_user(tmp_path: Path, page):
    from playwright.sync_api import expect

    up: Up = start_up("examples/memory", tmp_path)
    try:
        up.all_ready()
        said = httpx.post(
            f"{up.gateway}/default/agent/assistant/v1/chat/completions",
            json={"model": "scripted", "messages": [{"role": "user", "content": "Hello! I live in Lisbon."}]},
            headers={"X-Forwarded-User": "ana"},
            timeout=60,
        )
        assert said.status_code == 200, said.text
        page.goto(f"{up.gateway}/memory")
        # The fact is extracted in the background: the page shows it once the store has it.
        fact = page.get_by_text("I live in Lisbon.")
        for _ in range(60):
            if fact.count():
                break
            page.wait_for_timeout(1000)
            page.reload()
        expect(fact).to_be_visible()
        expect(page.get_by_role("heading", name="ana")).to_be_visible()
        shot(page, "console-memory")

        # Ana asks in the chat (as an authenticating proxy would name her): memory's recall shows inline before
        # the answer, then the search_memory tool call with what it found.
        page.context.set_extra_http_headers({"X-Forwarded-User": "ana"})
        page.goto(f"{up.gateway}/chat?agent=default/assistant")
        page.get_by_label("Message").fill("where do I live?")
        page.get_by_role("button", name="Send").click()
        transcript = page.locator("#transcript")
        expect(page.get_by_role("status")).to_have_text("Done.")
        expect(transcript.locator(".turn.recall li")).to_have_text(["I live in Lisbon."])
        expect(transcript.locator(".turn.tool")).to_contain_text("search_memory")
        expect(transcript.locator(".turn.tool .result")).to_contain_text("I live in Lisbon.")
        expect(transcript.locator(".turn.assistant .body")).to_contain_text("From my memory:")
        shot(page, "console-chat-memory")
        page.goto(f"{up.gateway}/memory")

        # On a phone's width: the facts and the confirmation fit it.
        page.set_viewport_size({"width": 390, "height": 844})
        page.reload()
        expect(page.get_by_text("I live in Lisbon.")).to_be_visible()
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        page.get_by_role("link", name="Erase user ana").click()
        expect(page.get_by_text("This cannot be undone")).to_be_visible()
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        page.get_by_role("button", name="Erase ana").click()
        expect(page.get_by_role("status")).to_have_text("Erased every memory of user ana.")
        expect(page.get_by_text("I live in Lisbon.")).to_have_count(0)
    finally:
        stop(up)


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as started:
        yield started


def test_multi_agent_graph_shows_delegations_and_the_chat_follows_one_into_the_peer(
    tmp_path: Path, page, receiver: OtlpReceiver
):
    from playwright.sync_api import expect

    viewer = "http://traces.example/trace/{trace_id}"
    up: Up = start_up("examples/multi-agent", tmp_path, "--otel-endpoint", receiver.endpoint, "--trace-url", viewer)
    try:
        up.all_ready()
        page.goto(f"{up.gateway}/")
        coordinator = page.locator("#graph tr", has=page.get_by_role("cell", name="coordinator", exact=True))
        expect(coordinator.locator("li.link-delegates")).to_have_text(["delegates to math", "delegates to clock"])
        expect(coordinator.locator("li.link-model")).to_have_text("model scripted")
        math = page.locator("#graph tr", has=page.get_by_role("cell", name="math", exact=True))
        expect(math.locator("li.link-tools")).to_have_text("tools calculator")
        network = page.locator("#network")
        for edge in ("coordinator delegates math", "coordinator delegates clock", "math tools calculator"):
            expect(network.locator(f'[data-edge="{edge}"]')).to_have_count(1)
        expect(network.locator('[data-node="Agent/default/math"]')).to_contain_text("Ready")
        shot(page, "console-graph-multi-agent")

        page.goto(f"{up.gateway}/chat?agent=default/coordinator")
        page.get_by_label("Message").fill("what is 4 plus 5")
        page.get_by_role("button", name="Send").click()
        transcript = page.locator("#transcript")
        delegation = transcript.locator(".turn.delegation")
        expect(delegation).to_contain_text("to math")
        expect(delegation).to_contain_text("Result: 4 plus 5 is 9.")
        expect(transcript.locator(".turn.assistant .body")).to_have_text("The math specialist says: 4 plus 5 is 9.")
        expect(page.get_by_role("status")).to_have_text("Done.")
        thread = page.locator("#thread").inner_text()
        # After the run, its trace id, linked to the trace viewer (--trace-url).
        chat_trace = transcript.locator(".turn-trace a")
        expect(chat_trace).to_have_text(re.compile(r"^[0-9a-f]{32}$"))
        chat_trace_id = chat_trace.inner_text()
        expect(chat_trace).to_have_attribute("href", viewer.replace("{trace_id}", chat_trace_id))
        expect(chat_trace).to_have_attribute("target", "_blank")
        expect(chat_trace).to_have_attribute("rel", "noopener")
        shot(page, "console-chat-delegation")

        # Followed into the peer: math's session the delegated task ran in, with the task and math's own tool call.
        delegation.get_by_role("link", name="Follow into math's session").click()
        expect(page.get_by_role("heading", name=f"Session {thread}.coordinator")).to_be_visible()
        timeline = page.locator(".timeline")
        expect(timeline.get_by_text("task_delegation_received", exact=True)).to_be_visible()
        expect(timeline.get_by_text("what is 4 plus 5", exact=True)).to_be_visible()
        expect(timeline.locator(".event-tool_call")).to_contain_text('"add"')
        expect(timeline.locator(".event-agent_response")).to_contain_text("4 plus 5 is 9.")
        expect(page.get_by_role("link", name="coordinator")).to_be_visible()
        shot(page, "console-session-delegated")

        # And from the coordinator's timeline the same way.
        page.goto(f"{up.gateway}/sessions/default/coordinator/{thread}")
        request = page.locator(".event-delegation_request")
        expect(request).to_contain_text('"agent": "math"')
        request.get_by_role("link", name="Follow into math's session").click()
        expect(page.get_by_role("heading", name=f"Session {thread}.coordinator")).to_be_visible()

        # Each turn shows its trace id: the coordinator's delegation span's, which math's turn continues.
        delegated = receiver.wait_for_span(
            lambda s: (
                s.name == "invoke_agent math" and s.attributes.get("gen_ai.conversation.id") == f"{thread}.coordinator"
            ),
            timeout=60,
        )
        assert chat_trace_id == delegated.trace_id
        expect(page.locator(".turn-trace code")).to_have_text([delegated.trace_id])
        page.goto(f"{up.gateway}/sessions/default/coordinator/{thread}")
        expect(page.locator(".turn-trace code")).to_have_text([delegated.trace_id])
        link = page.locator(".turn-trace a")
        expect(link).to_have_attribute("href", viewer.replace("{trace_id}", delegated.trace_id))
        expect(link).to_have_attribute("target", "_blank")
        expect(link).to_have_attribute("rel", "noopener")
        shot(page, "console-session-trace")
    finally:
        stop(up)


def test_a_waiting_agent_shows_its_phase_and_why_on_the_graph_and_in_the_chat(tmp_path: Path, page):
    from playwright.sync_api import expect

    from tests.e2e.test_kora_up import BROKEN_TOOLS

    manifest = tmp_path / "broken.yaml"
    manifest.write_text(BROKEN_TOOLS)
    up: Up = start_up(str(manifest), tmp_path)
    try:
        # Its tool server cannot load its tools: the agent runs (its own probe answers), Waiting for it.
        expected = {"scripted": "Ready", "tools": "Failed", "assistant": "Waiting"}
        up.wait(
            lambda s: (
                {w.name: w.phase for w in s.workloads} == expected
                and "waiting for MCPServer/tools (Failed)" in s.workload("assistant").message
            ),
            within=120,
            what="the tool server Failed and the agent Waiting",
        )
        page.goto(f"{up.gateway}/")
        assistant = page.locator("#graph tr", has=page.get_by_role("cell", name="assistant", exact=True))
        expect(assistant.get_by_text("Waiting", exact=True)).to_be_visible()
        expect(assistant.locator("td").last).to_have_text("waiting for MCPServer/tools (Failed)")
        tools = page.locator("#graph tr", has=page.get_by_role("cell", name="tools", exact=True))
        expect(tools.get_by_text("Failed", exact=True)).to_be_visible()
        expect(page.locator('#network [data-node="Agent/default/assistant"]')).to_contain_text("Waiting")
        shot(page, "console-graph-waiting")

        page.get_by_role("link", name="Chat").click()
        # The Chat page says it once, as it is when rendered: kora up restarts a failed tool server, so it reads
        # Failed or, during a restart, Waiting.
        expect(page.get_by_role("alert")).to_contain_text(
            re.compile(r"assistant is Waiting: waiting for MCPServer/tools \((Failed|Waiting)\)\.")
        )
    finally:
        stop(up)


def test_a_chat_run_paused_for_approval_names_each_waiting_call(tmp_path: Path, page):
    from playwright.sync_api import expect

    quickstart = (Path(__file__).resolve().parents[2] / "examples" / "quickstart" / "kora.yaml").read_text()
    manifest = tmp_path / "approvals.yaml"
    approval = "    toolApproval:\n      required: [tools/add]\n"
    manifest.write_text(quickstart.replace("    agenticLoop:\n", approval + "    agenticLoop:\n", 1))
    up: Up = start_up(str(manifest), tmp_path)
    try:
        up.all_ready()
        page.goto(f"{up.gateway}/")
        page.get_by_role("link", name="Chat").click()
        page.get_by_label("Message").fill("what is 2 plus 3")
        page.get_by_role("button", name="Send").click()
        expect(page.get_by_role("status")).to_have_text("Waiting for approval.")
        waiting = page.locator("#transcript .turn.approval")
        expect(waiting.locator(".approval strong")).to_have_text("add")
        expect(waiting.locator(".approval code")).to_have_text(re.compile(r"^appr_[0-9a-f]{32}$"))
        shot(page, "console-chat-approval")
    finally:
        stop(up)


def test_approvals_page_lists_a_paused_deletion_and_approving_or_rejecting_it_lets_the_turn_finish(
    tmp_path: Path, page
):
    from playwright.sync_api import expect

    up: Up = start_up("examples/approvals", tmp_path)
    # Every request the pages make, to show that nothing is fetched from another host.
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    try:
        up.all_ready()
        page.goto(f"{up.gateway}/approvals")
        janitor = page.locator("section.agent-approvals", has=page.get_by_role("heading", name="janitor"))
        expect(janitor).to_contain_text("No tool call waits for approval.")

        # The chat's turn pauses before the deletion runs; its "Waiting for approval" entry leads to the page.
        page.goto(f"{up.gateway}/chat?agent=default/janitor")
        page.get_by_label("Message").fill("delete notes.txt")
        page.get_by_role("button", name="Send").click()
        expect(page.get_by_role("status")).to_have_text("Waiting for approval.")
        thread = page.locator("#thread").inner_text()
        approval_id = page.locator("#transcript .turn.approval .approval code").inner_text()
        page.get_by_role("link", name="Approve or reject on the Approvals page").click()

        call = page.locator(f'li.approval[id="{approval_id}"]')
        expect(call.locator(".tool")).to_have_text("delete_file")
        expect(call).to_contain_text("files/delete_file")
        expect(call.locator("pre")).to_contain_text('"name": "notes.txt"')
        expect(call.get_by_role("link", name=thread)).to_be_visible()
        shot(page, "console-approvals")

        call.get_by_role("button", name="Approve").click()
        expect(page.get_by_role("status")).to_have_text(
            f"Approved the call {approval_id} of default/janitor: the turn went on and ended (stop)."
        )
        expect(janitor).to_contain_text("No tool call waits for approval.")
        page.goto(f"{up.gateway}/sessions/default/janitor/{thread}")
        timeline = page.locator(".timeline")
        expect(timeline.locator(".event-agent_response").last).to_contain_text("About notes.txt: deleted notes.txt")

        # Rejected with a reason, on a phone's width with the keyboard alone: the deletion does not run and the
        # model is told why.
        page.set_viewport_size({"width": 390, "height": 844})
        page.goto(f"{up.gateway}/chat?agent=default/janitor")
        page.get_by_label("Message").fill("delete todo.txt")
        page.get_by_role("button", name="Send").click()
        expect(page.get_by_role("status")).to_have_text("Waiting for approval.")
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        rejected_id = page.locator("#transcript .turn.approval .approval code").last.inner_text()
        page.goto(f"{up.gateway}/approvals")
        call = page.locator(f'li.approval[id="{rejected_id}"]')
        expect(call.locator("pre")).to_contain_text('"name": "todo.txt"')
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        reason = call.get_by_label("Reason (optional, for a rejection)")
        for _ in range(20):  # the skip link, the navigation, the session link, then the reason
            page.keyboard.press("Tab")
            if reason.evaluate("field => field === document.activeElement"):
                break
        expect(reason).to_be_focused()
        page.keyboard.type("keep it until Friday")
        page.keyboard.press("Tab")
        expect(call.get_by_role("button", name="Approve")).to_be_focused()
        page.keyboard.press("Tab")
        expect(call.get_by_role("button", name="Reject")).to_be_focused()
        page.keyboard.press("Enter")
        expect(page.get_by_role("status")).to_have_text(
            f"Rejected the call {rejected_id} of default/janitor: the turn went on and ended (stop)."
        )
        page.goto(f"{up.gateway}/sessions/default/janitor/{thread}")
        expect(timeline.locator(".event-agent_response").last).to_contain_text(
            "About todo.txt: Error: the call was rejected by a person: keep it until Friday"
        )
        expect(timeline.locator(".event-tool_result").last).to_contain_text("rejected by a person: keep it")
        expect(timeline.get_by_text("deleted todo.txt")).to_have_count(0)
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        page.goto(f"{up.gateway}/sessions?agent=default/janitor")
        expect(page.get_by_role("link", name=thread)).to_be_visible()
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        assert requested
        assert [url for url in requested if not url.startswith(f"{up.gateway}/")] == []
    finally:
        stop(up)
