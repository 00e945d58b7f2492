"""The agent server's HTTP routes: one module per group of endpoints, each serving one ``AgentState``.

Modules: :mod:`.chat` (``POST /v1/chat/completions``, ``GET /v1/models``), :mod:`.responses`
(``POST /v1/responses``, ``GET`` / ``DELETE /v1/responses/{id}``, ``.../input_items``, ``.../cancel``),
:mod:`.background` (the background responses it runs), :mod:`.conversations` (``/v1/conversations`` and its
items), :mod:`.queries` (query parameters of those listings), :mod:`.ag_ui` (``POST /ag-ui``), :mod:`.tools`
(``GET /tools``), :mod:`.memory` (``GET /memory/events``, ``GET /memory/sessions``), :mod:`.probes`
(``GET /health``, ``GET /ready``); :mod:`.request_route` (the route class of an endpoint that reads the request
itself, served without FastAPI's per-request parameter solving). The exception handlers are the chassis's
(:mod:`kora.core.serving.errors`: OpenAI's error body under ``/v1``, ``{"detail"}`` elsewhere). A2A's routes come
from ``kora.agent.a2a.routes``.

Each ``add_*_routes(router, state)`` adds its endpoints to ``router`` (the app's own ``app.router``), and
the endpoints close over ``state``: no per-request dependency resolves it. The app's route table stays flat
because FastAPI's ``include_router`` keeps each included router as a nested branch that is matched again on
every request (with FastAPI 0.165, 13-19 us more per request than the flat table).

Like ``kora.agent.app``, nothing here imports pydantic-ai, ``mcp`` or ``openai`` (an import-linter contract): the
Responses routes load their answers (:mod:`kora.agent.responses_answers`, built from ``openai``'s types) by name on
their first request.
"""
