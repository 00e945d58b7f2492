"""The app a server runs while the workload's app is built (:class:`kora.core.serving.BuildingApp`), served by uvicorn
on 127.0.0.1: the probes answer during the build, a request made meanwhile waits and is the app's, the app's own
lifespan runs in order, and a build or start-up that fails stops the server with the error kept."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from http.client import HTTPConnection

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from kora.core.errors import AppStartupFailed
from kora.core.serving import BuildingApp, StartupText
from tests.support.eventually import eventually
from tests.support.threaded import ThreadedServer

pytestmark = pytest.mark.integration

TEXT = StartupText(subject="The thing", starting="the thing is being built", failed="the thing failed to start")


class Gated:
    """A build that waits for :meth:`release` (or the test's end), then makes a Starlette app whose lifespan and
    requests are written to :attr:`events` in the order they happen."""

    def __init__(self, *, fail_build: bool = False, fail_startup: bool = False, fail_shutdown: bool = False) -> None:
        self.gate = threading.Event()
        self.building = threading.Event()
        self.events: list[str] = []
        self.fail_build, self.fail_startup, self.fail_shutdown = fail_build, fail_startup, fail_shutdown

    def release(self) -> None:
        self.gate.set()

    def build(self) -> Starlette:
        self.building.set()
        assert self.gate.wait(30), "the test never released the build"
        self.events.append("built")
        if self.fail_build:
            raise ValueError("THING_URL: must be a URL")

        @asynccontextmanager
        async def lifespan(_: Starlette) -> AsyncIterator[dict[str, str]]:
            self.events.append("startup")
            if self.fail_startup:
                raise RuntimeError("no database")
            yield {"made_by": "lifespan"}
            self.events.append("shutdown")
            if self.fail_shutdown:
                raise RuntimeError("cannot flush")

        async def echo(request: Request) -> JSONResponse:
            self.events.append(f"request {request.url.path}")
            return JSONResponse({"echo": (await request.json())["n"], "state": request.state.made_by})

        async def ready(request: Request) -> JSONResponse:
            return JSONResponse({"status": "ready", "by": "app"})

        async def health(request: Request) -> JSONResponse:
            return JSONResponse({"status": "ok", "by": "app"})

        routes = [Route("/echo", echo, methods=["POST"]), Route("/ready", ready), Route("/health", health)]
        return Starlette(routes=routes, lifespan=lifespan)


@contextmanager
def serving(gated: Gated, wait_seconds: float = 30) -> Iterator[tuple[BuildingApp, httpx.Client, threading.Event]]:
    """``gated``'s build served by uvicorn through a :class:`BuildingApp`; the event is set when it asks the server
    to stop."""
    front = BuildingApp(gated.build, TEXT, identity={"thing": "t"}, wait_seconds=wait_seconds)
    stopped = threading.Event()
    front.on_failure(stopped.set)
    try:
        with (
            ThreadedServer(front, name="building", lifespan="on") as server,
            httpx.Client(base_url=server.root_url, timeout=30) as client,
        ):
            yield front, client, stopped
    finally:
        gated.release()  # a test that failed early leaves no build waiting


def sent(client: httpx.Client, method: str, path: str, body: object) -> HTTPConnection:
    """A connection to ``client``'s server on which ``method path`` with the JSON ``body`` has been sent in full
    (its answer not read yet)."""
    connection = HTTPConnection(client.base_url.host, client.base_url.port, timeout=30)
    connection.request(method, path, json.dumps(body), {"Content-Type": "application/json"})
    return connection


def test_the_probes_answer_while_the_app_is_built_and_a_request_made_meanwhile_is_the_apps() -> None:
    gated = Gated()
    with serving(gated) as (front, client, stopped):
        assert gated.building.wait(30)
        health = client.get("/health")
        assert (health.status_code, health.json()) == (200, {"status": "ok", "thing": "t"})
        ready = client.get("/ready")
        assert (ready.status_code, ready.json()) == (
            503,
            {"status": "starting", "reasons": ["the thing is being built"]},
        )
        early = sent(client, "POST", "/echo", {"n": 1})  # sent in full before the build may end
        gated.release()
        answer = early.getresponse()
        assert (answer.status, json.loads(answer.read())) == (200, {"echo": 1, "state": "lifespan"})
        assert gated.events == ["built", "startup", "request /echo"]  # the app's start-up ran before its request
        # Built and started, every request is the app's, the probes too.
        assert client.get("/ready").json() == {"status": "ready", "by": "app"}
        assert client.get("/health").json() == {"status": "ok", "by": "app"}
        assert client.post("/echo", json={"n": 2}).json() == {"echo": 2, "state": "lifespan"}
        assert front.error is None
        assert not stopped.is_set()
    assert gated.events[-1] == "shutdown"  # the server's stop ran the app's shutdown


def test_a_build_that_fails_stops_the_server_keeps_the_error_and_answers_waiting_requests_503() -> None:
    gated = Gated(fail_build=True)
    with serving(gated) as (front, client, stopped):
        assert gated.building.wait(30)
        early = sent(client, "POST", "/v1/echo", {"n": 1})
        gated.release()
        assert stopped.wait(30)
        answer = early.getresponse()
        assert answer.status == 503
        assert json.loads(answer.read())["error"]["code"] == "startup_failed"
        assert isinstance(front.error, ValueError)
        assert str(front.error) == "THING_URL: must be a URL"
        # Never the app's: the failure, on both probes (a liveness probe restarts the process).
        ready = client.get("/ready")
        assert (ready.status_code, ready.json()) == (
            503,
            {"status": "failed", "reasons": ["the thing failed to start: ValueError: THING_URL: must be a URL"]},
        )
        health = client.get("/health")
        assert (health.status_code, health.json()) == (503, {"status": "failed", "thing": "t"})
    assert gated.events == ["built"]


def test_a_build_that_hangs_fails_the_liveness_probe_once_it_ran_longer_than_it_may() -> None:
    gated = Gated()
    with serving(gated, wait_seconds=0.5) as (_, client, stopped):
        assert gated.building.wait(30)
        assert client.get("/health").status_code == 200  # building, for now
        hung = eventually(lambda: client.get("/health").status_code == 503, "/health answering 503")
        assert hung
        assert client.get("/health").json() == {"status": "hung", "thing": "t"}
        assert client.get("/ready").json()["status"] == "starting"
        assert not stopped.is_set()  # the build may still end: the probe decides, not the server


class Records(logging.Handler):
    """Keeps the messages logged to it."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_a_shutdown_that_fails_is_logged_once_and_reported_to_the_server_as_failed() -> None:
    gated = Gated(fail_shutdown=True)
    ours, servers = Records(), Records()
    loggers = [(logging.getLogger("kora.serving"), ours), (logging.getLogger("uvicorn.error"), servers)]
    for logger, records in loggers:
        logger.addHandler(records)
    try:
        with serving(gated) as (front, client, _):
            gated.release()
            eventually(lambda: client.get("/ready").json().get("by") == "app", "the app's /ready")
        assert gated.events[-1] == "shutdown"
        assert front.error is None
    finally:
        for logger, records in loggers:
            logger.removeHandler(records)
    assert len(ours.messages) == 1, ours.messages  # the app's own report, with its traceback, not a second one
    assert ours.messages[0].startswith("The thing failed to shut down")
    assert "cannot flush" in ours.messages[0]
    assert "Application shutdown failed. Exiting." in servers.messages
    assert "Application shutdown complete." not in servers.messages


def test_an_app_whose_start_up_fails_stops_the_server() -> None:
    gated = Gated(fail_startup=True)
    with serving(gated) as (front, _, stopped):
        gated.release()
        assert stopped.wait(30)
        assert isinstance(front.error, AppStartupFailed)
        assert "no database" in str(front.error)
    assert gated.events == ["built", "startup"]


class ReleaseOnStop(logging.Handler):
    """Releases ``gated``'s build when the server running it has begun to stop (what it logs then)."""

    def __init__(self, gated: Gated) -> None:
        super().__init__(logging.INFO)
        self.gated = gated

    def emit(self, record: logging.LogRecord) -> None:
        if "stops before its start-up has ended" in record.getMessage():
            self.gated.release()


def test_a_stop_during_the_build_waits_for_it_and_never_starts_the_app() -> None:
    gated = Gated()
    front = BuildingApp(gated.build, TEXT)
    logger, handler = logging.getLogger("kora.serving"), ReleaseOnStop(gated)
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        with ThreadedServer(front, name="building", lifespan="on"):
            assert gated.building.wait(30)
        # Leaving the block stopped the server: its shutdown waited for the build, released only then.
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        gated.release()
    assert gated.events == ["built"]
    assert front.error is None


SERVE = """
import sys
from contextlib import asynccontextmanager
from starlette.applications import Starlette
from kora.core.command import serve_while_building, survive_uvicorn_stop_signal
from kora.core.serving import BuildingApp, StartupText

def build():
    if sys.argv[1] == "build":
        raise ValueError("THING_URL: must be a URL")
    @asynccontextmanager
    async def lifespan(app):
        raise RuntimeError("no database")
        yield
    return Starlette(lifespan=lifespan)

survive_uvicorn_stop_signal()
try:
    serve_while_building(
        BuildingApp(build, StartupText("The thing", "starting", "failed")),
        host="127.0.0.1", port=0, log_level="warning", access_log=False,
    )
except ValueError as error:
    print("raised:", error)
    sys.exit(2)
"""


@pytest.mark.parametrize(
    ("fails", "code", "says"),
    [("build", 2, "raised: THING_URL: must be a URL"), ("startup", 3, "The thing failed to start")],
)
def test_serve_while_building_raises_the_builds_error_and_exits_3_when_the_start_up_fails(
    fails: str, code: int, says: str
) -> None:
    done = subprocess.run([sys.executable, "-c", SERVE, fails], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == code, done.stdout + done.stderr
    assert says in done.stdout + done.stderr
    if fails == "build":
        assert "Traceback" not in done.stderr  # the command reports it its own way
