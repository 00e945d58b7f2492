"""The console's HTTP application: server-rendered pages (Jinja2 templates shipped in the package) and one small
script for what must happen in the browser (the graph refreshing itself, the chat streaming over AG-UI).

Pages: ``GET /`` the graph (a drawing of every workload and the links between them, who may delegate to whom
included, then a table of each with its kind, phase, links and message), ``GET /chat?agent=ns/name``,
``GET /sessions?agent=ns/name`` and ``GET /sessions/{namespace}/{agent}/{session_id}`` (a session's events as a
timeline, each delegation linking to the peer's session it ran in:
``GET /sessions/{namespace}/{agent}/{session_id}/delegated/{peer}`` redirects there),
``GET /memory?store=ns/name`` (facts per user) with ``GET /memory/erase`` (the confirmation) and
``POST /memory/erase``, ``GET /approvals`` (every agent's tool calls waiting for a person's approval) with
``POST /approvals/decide`` (approve or reject one, as the agent's operator). ``GET /api/state`` is the graph as
JSON; ``GET /api/sessions/{namespace}/{agent}/{session_id}/trace`` the trace id of the session's last turn,
``{"trace_id", "url"}`` (``trace_id`` None without tracing; ``url`` the trace viewer's page of it with
``CONSOLE_TRACE_URL``, else None), which the chat shows after each run; ``GET /health`` and ``GET /ready`` are the
probes. Assets are served from ``/assets``: nothing is fetched from another host. With ``CONSOLE_TRACE_URL`` set,
every trace id shown links to the trace viewer (a new tab).

With ``CONSOLE_ACCESS_TOKEN`` set, every route but the probes asks for it (:mod:`kora.console.access`).

An erasure and a decision are form POSTs that must come from the console's own pages (a browser's
``Sec-Fetch-Site``, when sent, says ``same-origin``), so another site cannot make a visitor's browser erase a user
or run a tool.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from kora.console.access import RequireAccessToken
from kora.console.layout import NODE_HEIGHT, NODE_WIDTH, layout
from kora.console.settings import ConsoleSettings
from kora.console.sources import ConsoleResource, LocalSources, Sources
from kora.core.errors import SourceError
from kora.core.protocol import child_session_id
from kora.core.serving import Readiness, Status, probe_routes
from kora.core.trace_links import fill_trace_url
from kora.resources import Kind

HERE = Path(__file__).parent
#: Navigation: (path, label).
NAVIGATION = (
    ("/", "Graph"),
    ("/chat", "Chat"),
    ("/sessions", "Sessions"),
    ("/approvals", "Approvals"),
    ("/memory", "Memory"),
)


def create_app(settings: ConsoleSettings) -> Starlette:
    """The console for the ``kora up`` run of ``settings.console_state_dir``."""
    templates = Jinja2Templates(directory=HERE / "templates")
    templates.env.globals["peer_session_path"] = peer_session_path

    def trace_link(trace_id: str) -> str | None:
        """The configured trace viewer's page of ``trace_id`` (None without ``CONSOLE_TRACE_URL``)."""
        return fill_trace_url(settings.console_trace_url, trace_id) if settings.console_trace_url else None

    templates.env.globals["trace_url"] = trace_link
    holder: dict[str, Sources] = {}

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with httpx.AsyncClient(trust_env=False) as client:
            if settings.console_source == "kubernetes":
                from kora.console.cluster import ClusterSources

                async with ClusterSources.connect(client, settings.namespaces) as sources:
                    holder["sources"] = sources
                    yield
            else:
                holder["sources"] = LocalSources(settings.console_state_dir, client)
                yield

    def page(request: Request, template: str, status: int = 200, **context: Any) -> Response:
        context.setdefault("error", None)
        current = "/" + request.url.path.strip("/").split("/")[0] if request.url.path != "/" else "/"
        return templates.TemplateResponse(
            request, template, {"navigation": NAVIGATION, "current": current, **context}, status_code=status
        )

    async def resources_or_error() -> tuple[list[ConsoleResource], str | None]:
        try:
            return await holder["sources"].resources(), None
        except SourceError as error:
            return [], str(error)

    async def graph(request: Request) -> Response:
        resources, error = await resources_or_error()
        return page(
            request,
            "graph.html",
            resources=resources,
            drawing=layout(resources),
            node_width=NODE_WIDTH,
            node_height=NODE_HEIGHT,
            error=error,
        )

    async def api_state(_: Request) -> Response:
        resources, error = await resources_or_error()
        return JSONResponse({"resources": [asdict(r) for r in resources], "error": error})

    async def chat(request: Request) -> Response:
        resources, error = await resources_or_error()
        agents = [r for r in resources if r.kind == Kind.AGENT.value]
        chosen = _chosen(agents, request.query_params.get("agent"))
        if error is None and not agents:
            error = f"{holder['sources'].origin} has no Agent to talk to."
        return page(request, "chat.html", agents=agents, agent=chosen, error=error)

    async def sessions(request: Request) -> Response:
        resources, error = await resources_or_error()
        agents = [r for r in resources if r.kind == Kind.AGENT.value]
        chosen = _chosen(agents, request.query_params.get("agent"))
        listed: list[dict[str, Any]] = []
        if error is None and chosen is None:
            error = f"{holder['sources'].origin} has no Agent."
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
            agent = await holder["sources"].find(Kind.AGENT, f"{namespace}/{name}")
            events = await holder["sources"].events(agent, session_id)
        except SourceError as failure:
            error = str(failure)
        return page(request, "session.html", agent=agent, session_id=session_id, events=events, error=error)

    async def session_trace(request: Request) -> Response:
        namespace, name = request.path_params["namespace"], request.path_params["agent"]
        try:
            agent = await holder["sources"].find(Kind.AGENT, f"{namespace}/{name}")
            events = await holder["sources"].events(agent, request.path_params["session_id"])
        except SourceError as failure:
            return JSONResponse({"detail": str(failure)}, status_code=502)
        trace_ids = [str(e["metadata"]["trace_id"]) for e in events if (e.get("metadata") or {}).get("trace_id")]
        trace_id = trace_ids[-1] if trace_ids else None
        url = trace_link(trace_id) if trace_id else None
        return JSONResponse({"trace_id": trace_id, "url": url})

    async def delegated(request: Request) -> Response:
        namespace, name = request.path_params["namespace"], request.path_params["agent"]
        session_id, peer = request.path_params["session_id"], request.path_params["peer"]
        return RedirectResponse(peer_session_path(namespace, name, session_id, peer), status_code=303)

    async def memory(request: Request) -> Response:
        resources, error = await resources_or_error()
        stores = [r for r in resources if r.kind == Kind.MEMORY_STORE.value]
        chosen = _chosen(stores, request.query_params.get("store"))
        by_user: dict[str, list[dict[str, Any]]] = defaultdict(list)
        if error is None and chosen is None:
            error = f"{holder['sources'].origin} has no MemoryStore: an agent with pod-local memory keeps no facts."
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

    def foreign_post(request: Request, what: str) -> Response | None:
        """A 403 when the POST ``request`` did not come from the console's own pages, else None."""
        # A browser names the origin of every POST (Sec-Fetch-Site); only the console's own page may change
        # anything. Without the header the caller is no browser, which may post only with the access token
        # (checked before this route runs): with none configured, any local process could.
        site = request.headers.get("sec-fetch-site")
        if site is None and settings.console_access_token is None:
            return JSONResponse(
                {"detail": f"{what} must come from the console's own page (no Sec-Fetch-Site header was sent)."},
                status_code=403,
            )
        if site is not None and site not in ("same-origin", "none"):
            return JSONResponse({"detail": f"{what} must come from the console's own page."}, status_code=403)
        return None

    async def approvals_page(request: Request, status: int = 200, error: str | None = None) -> Response:
        resources, failure = await resources_or_error()
        agents = [r for r in resources if r.kind == Kind.AGENT.value]
        if failure is None and not agents:
            failure = f"{holder['sources'].origin} has no Agent."
        waiting: list[tuple[ConsoleResource, list[dict[str, Any]], str | None]] = []
        for agent in agents:
            try:
                waiting.append((agent, await holder["sources"].approvals(agent), None))
            except SourceError as problem:
                waiting.append((agent, [], str(problem)))
        query = request.query_params
        notice = _decided_notice(query.get("decision"), query.get("id"), query.get("agent"), query.get("turn"))
        return page(request, "approvals.html", status, waiting=waiting, notice=notice, error=error or failure)

    async def approvals(request: Request) -> Response:
        return await approvals_page(request)

    async def decide(request: Request) -> Response:
        refused = foreign_post(request, "A decision")
        if refused is not None:
            return refused
        form = await request.form()
        agent_key, approval_id = str(form.get("agent", "")), str(form.get("id", ""))
        decision, reason = str(form.get("decision", "")), str(form.get("reason", "")).strip()
        if decision not in ("approve", "reject") or not approval_id or not agent_key:
            return await approvals_page(request, 400, "A decision names an agent, a call and approve or reject.")
        try:
            agent = await holder["sources"].find(Kind.AGENT, agent_key)
            answer = await holder["sources"].decide(agent, approval_id, decision, reason or None)
        except SourceError as failure:
            return await approvals_page(request, 502, f"The call {approval_id} was not decided: {failure}")
        turn = answer.get("turn")
        outcome = "waiting" if turn is None else str(turn.get("finish_reason") or "finished")
        query = urlencode({"decision": decision, "id": approval_id, "agent": agent.key, "turn": outcome})
        return RedirectResponse(f"/approvals?{query}", status_code=303)

    async def erase_confirm(request: Request) -> Response:
        store_key, user_id = request.query_params.get("store"), request.query_params.get("user")
        error = None if user_id else "No user to erase was named."
        return page(request, "erase.html", store_key=store_key, user_id=user_id, error=error)

    async def erase(request: Request) -> Response:
        refused = foreign_post(request, "An erasure")
        if refused is not None:
            return refused
        form = await request.form()
        store_key, user_id = str(form.get("store", "")), str(form.get("user", ""))
        try:
            store = await holder["sources"].find(Kind.MEMORY_STORE, store_key or None)
            await holder["sources"].erase_user(store, user_id)
        except SourceError as failure:
            return page(request, "erase.html", 502, store_key=store_key, user_id=user_id, error=str(failure))
        return RedirectResponse(f"/memory?store={quote(store.key)}&erased={quote(user_id)}", status_code=303)

    app = Starlette(
        routes=[
            Route("/", graph),
            Route("/api/state", api_state),
            Route("/chat", chat),
            Route("/sessions", sessions),
            Route("/sessions/{namespace}/{agent}/{session_id}", session),
            Route("/sessions/{namespace}/{agent}/{session_id}/delegated/{peer}", delegated),
            Route("/api/sessions/{namespace}/{agent}/{session_id}/trace", session_trace),
            Route("/approvals", approvals, methods=["GET"]),
            Route("/approvals/decide", decide, methods=["POST"]),
            Route("/memory", memory),
            Route("/memory/erase", erase_confirm, methods=["GET"]),
            Route("/memory/erase", erase, methods=["POST"]),
            *probe_routes(lambda: Readiness(Status.READY)),
            Mount("/assets", StaticFiles(directory=HERE / "static"), name="assets"),
        ],
        lifespan=lifespan,
    )
    if settings.console_access_token is not None:
        app.add_middleware(RequireAccessToken, token=settings.console_access_token.get_secret_value())
    return app


def peer_session_path(namespace: str, agent: str, session_id: str, peer: str) -> str:
    """The console page of the session at ``peer`` that a delegation of ``agent``'s session ``session_id`` ran
    in: a delegated task's context id, which the peer keeps as its session id, is derived from the delegating
    session and agent (:func:`kora.core.protocol.child_session_id`)."""
    child = child_session_id(session_id, agent)
    return f"/sessions/{quote(namespace, safe='')}/{quote(peer, safe='')}/{quote(child, safe='')}"


def _decided_notice(decision: str | None, approval_id: str | None, agent: str | None, turn: str | None) -> str | None:
    """What a decision the console just posted did, in words (None when the page was not reached by one)."""
    if decision not in ("approve", "reject") or not approval_id:
        return None
    done = "Approved" if decision == "approve" else "Rejected"
    after = (
        "other calls of the same turn still wait for a decision."
        if turn == "waiting"
        else f"the turn went on and ended ({turn})."
    )
    return f"{done} the call {approval_id} of {agent}: {after}"


def _chosen(resources: list[ConsoleResource], key: str | None) -> ConsoleResource | None:
    """The resource ``key`` names (``namespace/name``), else the first."""
    for resource in resources:
        if resource.key == key:
            return resource
    return resources[0] if resources else None
