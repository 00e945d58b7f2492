"""The workload chassis (:mod:`kora.core.serving`): the start-up's states, the one ``/ready`` body, and the check
that every workload's ``/health`` and ``/ready`` are the chassis's."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from kora.core.errors import Unavailable
from kora.core.serving import Lifecycle, Readiness, StartupText, Status, is_probe_endpoint, probe_routes

pytestmark = pytest.mark.unit


class Body(BaseModel):
    """A request body of the error-policy test's app."""

    n: int


TEXT = StartupText(subject="The thing", starting="the thing is starting", failed="the thing failed to start")


async def test_a_start_up_is_starting_then_started_and_requests_wait_for_it() -> None:
    gate = asyncio.Event()
    lifecycle = Lifecycle(gate.wait, TEXT)
    lifecycle.begin()
    assert lifecycle.status is Status.STARTING
    assert lifecycle.readiness(["ignored while starting"]).body() == {
        "status": "starting",
        "reasons": ["the thing is starting"],
    }
    with pytest.raises(Unavailable) as starting:
        lifecycle.check()
    assert (starting.value.code, starting.value.message) == ("starting", "The thing is still starting.")
    waiting = asyncio.create_task(lifecycle.wait())
    await asyncio.sleep(0)
    assert not waiting.done()
    gate.set()
    await waiting
    assert lifecycle.started
    assert lifecycle.status is Status.READY
    assert lifecycle.readiness().http_status == 200
    ready = lifecycle.readiness(["the database is away"], {"n": 1})
    assert (ready.http_status, ready.body()) == (
        503,
        {"status": "not_ready", "reasons": ["the database is away"], "details": {"n": 1}},
    )
    await lifecycle.close()


async def test_a_failed_start_up_is_kept_and_said_by_ready_and_requests() -> None:
    async def broken() -> None:
        raise RuntimeError("no database")

    lifecycle = Lifecycle(broken, TEXT)
    await lifecycle.run()  # never raises
    assert lifecycle.status is Status.FAILED
    assert lifecycle.readiness().body() == {
        "status": "failed",
        "reasons": ["the thing failed to start: RuntimeError: no database"],
    }
    with pytest.raises(Unavailable) as failed:
        await lifecycle.wait()
    assert failed.value.code == "startup_failed"
    assert failed.value.message == "The thing failed to start: RuntimeError: no database"


async def test_a_request_waits_only_so_long_for_the_start_up() -> None:
    lifecycle = Lifecycle(asyncio.Event().wait, TEXT, wait_seconds=0.01)
    lifecycle.begin()
    with pytest.raises(Unavailable) as starting:
        await lifecycle.wait()
    assert starting.value.code == "starting"


def test_the_probes_answer_one_body_shape_and_ready_alone_decides_the_status() -> None:
    now = Readiness(Status.STARTING, ["loading"])

    async def readiness() -> Readiness:  # a coroutine check is awaited, as the memory service's is
        return now

    app = Starlette(routes=probe_routes(readiness, {"agent": "a"}))
    with TestClient(app) as client:
        assert client.get("/health").json() == {"status": "ok", "agent": "a"}
        ready = client.get("/ready")
        assert (ready.status_code, ready.json()) == (503, {"status": "starting", "reasons": ["loading"]})
        now = Readiness(Status.READY, details={"memory": "degraded: away"})
        ready = client.get("/ready")
        assert (ready.status_code, ready.json()) == (
            200,
            {"status": "ready", "details": {"memory": "degraded: away"}},
        )


def _agent() -> object:
    from kora.agent.app import create_app
    from kora.agent.settings import load_agent_settings
    from kora.memory.null import NullMemory

    settings = load_agent_settings({"AGENT_NAME": "a", "MODEL_API_URL": "http://127.0.0.1:9/v1", "MODEL_NAME": "m"})
    return create_app(settings, NullMemory())


def _memory_service() -> object:
    from kora.memory_service.app import create_app
    from kora.memory_service.settings import load_memory_service_settings

    return create_app(load_memory_service_settings({"MEMORY_SERVICE_DATABASE_URL": "postgresql://u@127.0.0.1:9/d"}))


def _hosted_model() -> object:
    from kora.hosted.app import create_hosted_app
    from kora.resources.hosted_models import find_hosted_model

    model = find_hosted_model("all-MiniLM-L6-v2")
    assert model is not None

    def never_loaded() -> object:
        raise AssertionError("the app is only built here, never started")

    return create_hosted_app(model, never_loaded)  # type: ignore[arg-type]


def _tool_server() -> object:
    from kora.mcp.app import create_app
    from kora.mcp.settings import load_mcp_settings

    return create_app(load_mcp_settings({"MCP_TOOLS_STRING": "def ping() -> str:\n    return 'pong'\n"}))


def _model_proxy() -> object:
    from kora.proxy.model_proxy import ProxySettings, create_proxy_app

    return create_proxy_app(ProxySettings(api_base="http://127.0.0.1:9/v1"))


def _console(tmp_path: Path) -> object:
    from kora.console.app import create_app
    from kora.console.settings import load_console_settings

    return create_app(load_console_settings({"CONSOLE_STATE_DIR": str(tmp_path)}))


def _scripted_model() -> object:
    from kora.scripted.model import create_app

    return create_app()._other


WORKLOADS: dict[str, Callable[[Path], object]] = {
    "agent": lambda _: _agent(),
    "memory service": lambda _: _memory_service(),
    "hosted model": lambda _: _hosted_model(),
    "tool server": lambda _: _tool_server(),
    "model proxy": lambda _: _model_proxy(),
    "console": _console,
    "scripted model": lambda _: _scripted_model(),
}


@pytest.mark.parametrize("workload", WORKLOADS)
def test_every_workload_serves_the_chassis_probes(workload: str, tmp_path: Path) -> None:
    app = WORKLOADS[workload](tmp_path)
    assert isinstance(app, Starlette)
    probes = {
        route.path: route.endpoint  # type: ignore[attr-defined]
        for route in app.routes
        if not isinstance(route, Mount) and getattr(route, "path", None) in {"/health", "/ready"}
    }
    assert set(probes) == {"/health", "/ready"}, f"{workload} serves {sorted(probes)}"
    for path, endpoint in probes.items():
        assert is_probe_endpoint(endpoint), f"{workload}'s {path} is its own, not kora.core.serving's"


def test_one_error_policy_openai_bodies_under_v1_detail_elsewhere_and_no_internals() -> None:
    from fastapi import FastAPI
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response

    from kora.core.errors import Unauthenticated
    from kora.core.serving.errors import install_error_handlers

    class Refused(Exception):
        pass

    async def refused(_: Request, error: Exception) -> Response:
        return JSONResponse({"refused": str(error)}, status_code=409)

    app = FastAPI()
    install_error_handlers(app, handlers={Refused: refused})

    @app.post("/v1/things")
    async def things(body: Body) -> dict[str, int]:
        return {"n": body.n}

    @app.post("/other")
    async def other(body: Body) -> dict[str, int]:
        return {"n": body.n}

    @app.get("/v1/secret")
    async def secret() -> None:
        raise Unauthenticated("A bearer token is needed.")

    @app.get("/v1/boom")
    async def boom() -> None:
        raise RuntimeError("/home/someone/secret.txt")

    @app.get("/v1/refuse")
    async def refuse() -> None:
        raise Refused("taken")

    with TestClient(app, raise_server_exceptions=False) as client:
        assert client.get("/v1/nothing").json()["error"]["code"] == "not_found"
        assert client.get("/v1/things").json()["error"]["code"] == "method_not_allowed"
        missing_v1 = client.post("/things", json={"n": 1})
        assert (missing_v1.status_code, missing_v1.json()["error"]["code"]) == (404, "missing_v1")
        assert client.get("/nothing").json() == {"detail": "Not Found"}
        invalid = client.post("/v1/things", json={"n": "x"})
        assert invalid.status_code == 400
        assert invalid.json()["error"]["message"].startswith("Invalid request: body.n: ")
        outside = client.post("/other", json={})
        assert outside.status_code == 400
        assert outside.json()["detail"].startswith("Invalid request: body.n: ")
        denied = client.get("/v1/secret")
        assert denied.status_code == 401
        assert denied.headers["www-authenticate"] == 'Bearer error="invalid_token"'
        failed = client.get("/v1/boom")
        assert failed.status_code == 500
        assert failed.json()["error"]["message"].startswith("Internal error (reference err_")
        assert "secret" not in failed.text
        assert "RuntimeError" not in failed.text
        assert (client.get("/v1/refuse").status_code, client.get("/v1/refuse").json()) == (409, {"refused": "taken"})


async def test_closing_after_a_cancelled_start_up_is_quiet() -> None:
    lifecycle = Lifecycle(asyncio.Event().wait, TEXT)
    lifecycle.begin()
    await asyncio.sleep(0)
    assert lifecycle._task is not None
    lifecycle._task.cancel()
    await lifecycle.close()
    assert lifecycle.status is Status.FAILED
