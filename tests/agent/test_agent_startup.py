"""Start-up order of the agent server: ``/health`` needs only the app, so the runtime (pydantic-ai) is imported after
it answers and ``/ready`` waits for it; the a2a-sdk is imported by the first A2A request, which waits for it.
``openai`` (the Responses answers' types) is imported by the first Responses request only. Once loaded, the agent
holds none of the optional packages its libraries import whenever installed and it never uses (gRPC, SQLAlchemy
without the shared task store, httpx's command-line client, HTTP/2, ``pydantic.v1``) and, without sub-agents, no
delegation client (httpx's transport).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import httpx
import pytest

from kora.agent.state import TRACED_YOUNG_GENERATION_THRESHOLD, YOUNG_GENERATION_THRESHOLD
from kora.core.net import free_port
from kora.scripted.model import ScriptedModel, create_app
from tests.support.a2a import message_params, rpc_body
from tests.support.eventually import eventually
from tests.support.processes import KORA, clean_env, kora_process, wait_healthy
from tests.support.threaded import ThreadedServer

pytestmark = pytest.mark.integration

#: Top-level packages the app must not import before it serves (each costs ~0.3-1 s of start-up).
DEFERRED = ("a2a", "pydantic_ai", "google.protobuf", "openai")

BUILD_APP = """
import sys
from kora.agent.cli import cli  # what `kora agent` imports
from kora.agent.app import create_app
from kora.agent.settings import AgentSettings
from kora.core.telemetry import instrument_app, setup_telemetry

app = create_app(AgentSettings(agent_name="a", model_api_url="http://127.0.0.1:9/v1", model_name="m"))
instrument_app(app, setup_telemetry("Agent", "a"))
print(" ".join(sorted(name for name in sys.modules if name.startswith({deferred!r}))))
"""


#: Packages and modules a loaded agent (A2A server and runtime built, local task store, no sub-agents) must not
#: hold: the SDKs' optional extras it does not use (httpx's command-line client, HTTP/2, FastAPI's question whether
#: a type is a pydantic v1 model), ``jsonschema``, which only a request with a response schema needs, and httpx's
#: transport (``httpcore``), which only the delegation client to sub-agents needs.
UNUSED = ("grpc", "sqlalchemy", "rich", "pygments", "h2", "hpack", "pydantic.v1", "httpcore", "jsonschema")

LOAD_APP = """
import asyncio
import gc
import sys
from kora.agent.app import create_app
from kora.agent.settings import AgentSettings

async def get(app, path: str) -> int:
    # One ASGI request, no HTTP client: the test also counts what a client library would import.
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": path, "raw_path": path.encode(), "query_string": b"",
             "headers": [(b"host", b"agent")], "http_version": "1.1", "scheme": "http", "root_path": "",
             "server": ("agent", 80), "client": ("127.0.0.1", 1), "app": app}
    await app(scope, receive, send)
    return sent[0]["status"]

async def main() -> None:
    app = create_app(AgentSettings(agent_name="a", model_api_url="http://127.0.0.1:9/v1", model_name="m"))
    async with app.router.lifespan_context(app):
        await app.state.kora.wait_runtime()
        print(type(app.state.kora.runtime).__name__, "a2a" in sys.modules, hasattr(app.state, "a2a"))
        frozen = gc.get_freeze_count()
        status = await get(app, "/.well-known/agent.json")
        print(status, type(app.state.a2a).__name__, gc.get_freeze_count() > frozen)
        print(" ".join(sorted(sys.modules)))

asyncio.run(main())
"""


def test_a_loaded_agent_holds_no_optional_package_it_does_not_use() -> None:
    # Nor the a2a-sdk until the first A2A request (the card's), which loads it and is answered.
    done = subprocess.run([sys.executable, "-c", LOAD_APP], capture_output=True, text=True, timeout=120, check=True)
    loaded, built, imported = (done.stdout + "\n\n").split("\n")[:3]
    assert loaded == "AgentRuntime False False", done.stdout + done.stderr
    assert built == "200 A2AServer True", done.stdout + done.stderr  # what it imported frozen, as start-up's
    assert "pydantic_ai" in imported.split(), imported  # the runtime did load
    held = [name for name in imported.split() if any(name == un or name.startswith(un + ".") for un in UNUSED)]
    assert held == [], held


RESPONSES_LOAD_OPENAI = """
import asyncio
import sys

import httpx

from kora.agent.app import create_app
from kora.agent.settings import AgentSettings
from kora.scripted.model import ScriptedModel, create_app as model_app
from tests.support.threaded import ThreadedServer


async def main() -> None:
    async with ThreadedServer(model_app(ScriptedModel()), name="scripted-model", lifespan="off") as model:
        settings = AgentSettings(agent_name="a", model_api_url=model.root_url + "/v1", model_name="scripted")
        app = create_app(settings)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://agent", timeout=60) as client,
        ):
            answers = [await client.get("/health")]
            held = ["openai" in sys.modules]
            await app.state.kora.wait_runtime()
            chat = {"messages": [{"role": "user", "content": "hi"}]}
            answers.append(await client.post("/v1/chat/completions", json=chat))
            held.append("openai" in sys.modules)
            answers.append(await client.post("/v1/responses", json={"input": "hello"}))
            held.append("openai" in sys.modules)
            print(" ".join(str(answer.status_code) for answer in answers))
            print(answers[-1].json()["output"][0]["content"][0]["text"])
            print(held)


asyncio.run(main())
"""


def test_openai_is_imported_by_the_first_responses_request_only() -> None:
    # Not by the app that answers /health, the loaded runtime or a chat turn: by the Responses route, for its answer.
    done = subprocess.run(
        [sys.executable, "-c", RESPONSES_LOAD_OPENAI], capture_output=True, text=True, timeout=120, check=True
    )
    statuses, text, held = done.stdout.splitlines()[:3]
    assert statuses == "200 200 200", done.stdout + done.stderr
    assert text == "You said: hello", done.stdout
    assert held == "[False, False, True]", done.stdout


SERVE_COMMAND = """
import sys
from kora.agent.cli import build_server, cli  # what `kora agent` imports
from kora.agent.settings import AgentSettings
from kora.core.command import run_command

run_command(lambda: 0, [], "kora agent")  # how `kora agent` (no arguments) is run
app, telemetry = build_server(AgentSettings(agent_name="a", model_api_url="http://127.0.0.1:9/v1", model_name="m"))
print(" ".join(sorted(name for name in sys.modules if name in {unused!r})))
print(telemetry.resource.attributes.get("process.owner") is not None)
"""

#: What ``kora agent`` imports to serve, besides the app's own (:data:`UNUSED`), and must not hold: Typer (no
#: arguments to parse), uvicorn's reloader, FastAPI's e-mail validator and, without an opt-in resource detector, psutil.
UNUSED_TO_SERVE = ("typer", "watchfiles", "email_validator", "psutil")


@pytest.mark.parametrize("detectors", ["", "process"])
def test_kora_agent_imports_what_it_does_not_use_only_when_asked(detectors: str) -> None:
    # `kora agent` takes no arguments (nothing for Typer to parse), serves an app object (nothing to reload) whose
    # OpenAPI document names no contact; psutil only for the SDK's process detector, which then reads it.
    env = clean_env(OTEL_EXPERIMENTAL_RESOURCE_DETECTORS=detectors)
    script = SERVE_COMMAND.format(unused=UNUSED_TO_SERVE)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True, env=env
    )
    held, owner = (done.stdout + "\n\n").split("\n")[:2]
    assert held.split() == (["psutil"] if detectors else []), done.stdout + done.stderr
    assert owner == str(bool(detectors)), done.stdout + done.stderr


def test_the_app_that_answers_health_imports_neither_the_a2a_sdk_nor_the_runtime_nor_openai() -> None:
    script = BUILD_APP.format(deferred=DEFERRED)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.split() == [], done.stdout


@contextmanager
def first_health(name: str, headers: dict[str, str] | None = None) -> Iterator[httpx.Client]:
    """A ``kora agent`` named ``name`` (on the scripted model), and a client for it from the moment its first
    ``/health`` answers 200."""
    with ThreadedServer(create_app(ScriptedModel()), name="scripted-model", lifespan="off") as model:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        env = clean_env(
            AGENT_NAME=name,
            AGENT_HOST="127.0.0.1",
            AGENT_PORT=str(port),
            MODEL_API_URL=model.root_url + "/v1",
            MODEL_NAME="scripted",
        )
        with (
            kora_process(["agent"], env, url + "/health"),
            httpx.Client(base_url=url, timeout=60, headers=headers) as client,
        ):
            yield client


def test_a2a_and_chat_requests_made_as_soon_as_health_answers_are_served() -> None:
    # The first 200 of /health: each request below waits for what it needs, none is a 404 or a 503.
    with first_health("early") as client:
        card = client.get("/.well-known/agent.json")
        assert card.status_code == 200, card.text
        assert card.json()["name"] == "early"
        sent = client.post("/", json=rpc_body("message/send", message_params("hello early")))
        assert sent.status_code == 200, sent.text
        assert sent.json()["result"]["status"]["state"] == "completed", sent.text
        chat = client.post(
            "/v1/chat/completions", json={"model": "early", "messages": [{"role": "user", "content": "hi"}]}
        )
        assert chat.status_code == 200, chat.text

        def ready_answer() -> httpx.Response | None:
            answer = client.get("/ready")
            return answer if answer.status_code == 200 else None

        ready = eventually(ready_answer, "/ready answering 200")
        assert ready.json() == {"status": "ready"}


def test_an_http_json_request_made_as_soon_as_health_answers_waits_for_the_sdk_instead_of_a_404() -> None:
    # The binding's routes are the SDK's; before it has loaded, its paths wait rather than answer 404.
    with first_health("early-rest", headers={"A2A-Version": "1.0"}) as client:
        message = {"role": "ROLE_USER", "messageId": "m-early", "parts": [{"text": "hello over REST"}]}
        sent = client.post("/message:send", json={"message": message})
        assert sent.status_code == 200, sent.text
        assert sent.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED", sent.text
        listed = client.get("/tasks")
        assert listed.status_code == 200, listed.text
        assert [task["id"] for task in listed.json()["tasks"]] == [sent.json()["task"]["id"]]
        assert client.get("/tasks/no-such-task").status_code == 404  # now the SDK's own answer


@contextmanager
def starting_agent(name: str) -> Iterator[tuple[subprocess.Popen[bytes], str, Callable[[], str]]]:
    """A ``kora agent`` named ``name`` (on the scripted model) just started: the process, its URL and a function
    giving its output so far (stdout and stderr, log level INFO). Killed if the test leaves it running."""
    with (
        ThreadedServer(create_app(ScriptedModel()), name="scripted-model", lifespan="off") as model,
        tempfile.TemporaryFile() as output,
    ):
        port = free_port()
        env = clean_env(
            AGENT_NAME=name,
            AGENT_HOST="127.0.0.1",
            AGENT_PORT=str(port),
            AGENT_LOG_LEVEL="INFO",
            MODEL_API_URL=model.root_url + "/v1",
            MODEL_NAME="scripted",
        )
        process = subprocess.Popen([*KORA, "agent"], env=env, stdout=output, stderr=subprocess.STDOUT)

        def said() -> str:
            output.seek(0)
            return output.read().decode(errors="replace")

        try:
            yield process, f"http://127.0.0.1:{port}", said
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(10)


def test_health_answers_from_the_servers_first_moment_and_ready_only_once_the_agent_is_ready() -> None:
    # Polled in turn from the start: /health's first 200 comes first, with the agent's name; /ready says "starting"
    # (the app being built, then the runtime loading) until it answers 200.
    with starting_agent("first") as (process, url, said), httpx.Client(base_url=url, timeout=30) as client:
        seen: list[tuple[str, int, dict[str, object]]] = []

        def ready() -> bool:
            assert process.poll() is None, said()
            for path in ("/health", "/ready"):
                answer = client.get(path)
                seen.append((path, answer.status_code, answer.json()))
            return seen[-1][1] == 200

        eventually(ready, "/ready answering 200", tolerate=(httpx.TransportError,), every=0.005, explain=said)
        health = [(status, body) for path, status, body in seen if path == "/health"]
        assert health == [(200, {"status": "ok", "agent": "first"})] * len(health)
        ready_answers = [(status, body) for path, status, body in seen if path == "/ready"]
        assert ready_answers[-1] == (200, {"status": "ready"})
        assert all(status == 503 and body["status"] == "starting" for status, body in ready_answers[:-1])


def test_a_stop_as_soon_as_health_answers_ends_the_agent_cleanly() -> None:
    # SIGTERM at the first 200 of /health, while the app is still being built (or just built): exit 0, no error.
    with starting_agent("stopped") as (process, url, said):
        wait_healthy(url + "/health", process, every=0.005, explain=said)
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0, said()
        assert "Traceback" not in said()
        assert " ERROR " not in said()


YOUNG_GENERATION = """
import asyncio
import gc
from kora.agent.app import create_app
from kora.agent.settings import AgentSettings

async def main() -> None:
    app = create_app(AgentSettings(agent_name="a", model_api_url="http://127.0.0.1:9/v1", model_name="m"))
    async with app.router.lifespan_context(app):
        await app.state.kora.wait_runtime()
        print(app.state.kora.runtime.tracing.enabled, gc.get_threshold()[0])

asyncio.run(main())
"""


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, f"False {YOUNG_GENERATION_THRESHOLD}"),
        # Spans waiting for the batch processor's export live longer than a turn.
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}, f"True {TRACED_YOUNG_GENERATION_THRESHOLD}"),
    ],
)
def test_a_started_agent_sets_its_young_generation_by_whether_it_traces(env: dict[str, str], expected: str) -> None:
    environ = {k: v for k, v in clean_env(**env).items() if not k.startswith("OTEL_") or k in env}
    done = subprocess.run(
        [sys.executable, "-c", YOUNG_GENERATION], env=environ, capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == expected, done.stdout + done.stderr
