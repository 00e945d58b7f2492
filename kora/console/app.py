"""The console's HTTP application: server-rendered pages (Jinja2 templates shipped in the package) and one small
script for what must happen in the browser (the graph refreshing itself, the chat streaming over AG-UI).

Pages: ``GET /`` the graph (every workload with its kind, phase and message), ``GET /chat?agent=ns/name``,
``GET /sessions?agent=ns/name`` and ``GET /sessions/{namespace}/{agent}/{session_id}`` (a session's events as a
timeline), ``GET /memory?store=ns/name`` (facts per user) with ``GET /memory/erase`` (the confirmation) and
``POST /memory/erase``. ``GET /api/state`` is the graph as JSON (the page's refresh); ``GET /health`` and
``GET /ready`` are the probes. Assets are served from ``/assets``: nothing is fetched from another host.

An erasure is a form POST that must come from the console's own pages (a browser's ``Sec-Fetch-Site``, when
sent, says ``same-origin``), so another site cannot make a visitor's browser erase a user.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from kora.console.settings import ConsoleSettings
from kora.console.sources import Resource, SourceError, Sources
from kora.core.serving import Readiness, Status, probe_routes
from kora.resources.models import Kind

HERE = Path(__file__).parent
#: Navigation: (path, label).
NAVIGATION = (("/", "Graph"), ("/chat", "Chat"), ("/sessions", "Sessions"), ("/memory", "Memory"))


def create_app(settings: ConsoleSettings) -> Starlette:
    """The console for the ``kora up`` run of ``settings.console_state_dir``."""
    templates = Jinja2Templates(directory=HERE / "templates")
    holder: dict[str, Sources] = {}

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with httpx.AsyncClient(trust_env=False) as client:
            holder["sources"] = Sources(settings.console_state_dir, client)
            yield

    def page(request: Request, template: str, status: int = 200, **context: Any) -> Response:
        context.setdefault("error", None)
        current = "/" + request.url.path.strip("/").split("/")[0] if request.url.path != "/" else "/"
        return templates.TemplateResponse(
            request, template, {"navigation": NAVIGATION, "current": current, **context}, status_code=status
        )

    def resources_or_error() -> tuple[list[Resource], str | None]:
        try:
            return holder["sources"].resources(), None
        except SourceError as error:
            return [], str(error)

    async def graph(request: Request) -> Response:
        resources, error = resources_or_error()
        return page(request, "graph.html", resources=resources, error=error)

    async def api_state(_: Request) -> Response:
        resources, error = resources_or_error()
        return JSONResponse({"resources": [asdict(r) for r in resources], "error": error})

    async def chat(request: Request) -> Response:
        resources, error = resources_or_error()
        agents = [r for r in resources if r.kind == Kind.AGENT.value]
        chosen = _chosen(agents, request.query_params.get("agent"))
        if error is None and not agents:
            error = "The kora up run has no Agent to talk to."
        return page(request, "chat.html", agents=agents, agent=chosen, error=error)

    async def sessions(request: Request) -> Response:
        resources, error = resources_or_error()
        agents = [r for r in resources if r.kind == Kind.AGENT.value]
        chosen = _chosen(agents, request.query_params.get("agent"))
        listed: list[dict[str, Any]] = []
        if error is None and chosen is None:
            error = "The kora up run has no Agent."
        if chosen is not None:
            try:
                listed = await holder["sources"].sessions(chosen)
            except SourceError as failure:
                error = str(failure)
        return page(request, "sessions.html", agents=agents, agent=chosen, sessions=listed, error=error)

    async def session(request: Request) -> Response:
        namespace, name = request.path_params["namespace"], request.path_params["agent"]
        session_id = request.path_params["session_id"]
        events: list[dict[str, Any]] = []
        agent = None
        error = None
        try:
            agent = holder["sources"].find(Kind.AGENT, f"{namespace}/{name}")
            events = await holder["sources"].events(agent, session_id)
        except SourceError as failure:
            error = str(failure)
        return page(request, "session.html", agent=agent, session_id=session_id, events=events, error=error)

    async def memory(request: Request) -> Response:
        resources, error = resources_or_error()
        stores = [r for r in resources if r.kind == Kind.MEMORY_STORE.value]
        chosen = _chosen(stores, request.query_params.get("store"))
        by_user: dict[str, list[dict[str, Any]]] = defaultdict(list)
        if error is None and chosen is None:
            error = "The kora up run has no MemoryStore: an agent with pod-local memory keeps no facts."
        if chosen is not None:
            try:
                for fact in await holder["sources"].facts(chosen):
                    by_user[fact.get("user_id") or ""].append(fact)
            except SourceError as failure:
                error = str(failure)
        notice = request.query_params.get("erased")
        return page(
            request, "memory.html", stores=stores, store=chosen, users=dict(by_user), error=error, notice=notice
        )

    async def erase_confirm(request: Request) -> Response:
        store_key, user_id = request.query_params.get("store"), request.query_params.get("user")
        error = None if user_id else "No user to erase was named."
        return page(request, "erase.html", store_key=store_key, user_id=user_id, error=error)

    async def erase(request: Request) -> Response:
        if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
            return JSONResponse({"detail": "An erasure must come from the console's own page."}, status_code=403)
        form = await request.form()
        store_key, user_id = str(form.get("store", "")), str(form.get("user", ""))
        try:
            store = holder["sources"].find(Kind.MEMORY_STORE, store_key or None)
            await holder["sources"].erase_user(store, user_id)
        except SourceError as failure:
            return page(request, "erase.html", 502, store_key=store_key, user_id=user_id, error=str(failure))
        return RedirectResponse(f"/memory?store={quote(store.key)}&erased={quote(user_id)}", status_code=303)

    return Starlette(
        routes=[
            Route("/", graph),
            Route("/api/state", api_state),
            Route("/chat", chat),
            Route("/sessions", sessions),
            Route("/sessions/{namespace}/{agent}/{session_id}", session),
            Route("/memory", memory),
            Route("/memory/erase", erase_confirm, methods=["GET"]),
            Route("/memory/erase", erase, methods=["POST"]),
            *probe_routes(lambda: Readiness(Status.READY)),
            Mount("/assets", StaticFiles(directory=HERE / "static"), name="assets"),
        ],
        lifespan=lifespan,
    )


def _chosen(resources: list[Resource], key: str | None) -> Resource | None:
    """The resource ``key`` names (``namespace/name``), else the first."""
    for resource in resources:
        if resource.key == key:
            return resource
    return resources[0] if resources else None
