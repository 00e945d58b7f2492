"""The agent app's route table: what clients and the OpenAPI document see, in one flat table."""

from __future__ import annotations

import pytest
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from starlette.routing import Route

from kora.agent.a2a.lazy import WaitingRestRoute
from kora.agent.app import create_app
from kora.agent.routes.request_route import RequestRoute
from kora.agent.settings import load_agent_settings
from kora.memory import NullMemory

pytestmark = pytest.mark.unit

#: A2A's card paths and JSON-RPC endpoint, added before the SDK loads.
CARD_AND_RPC = ["/.well-known/agent.json", "/.well-known/agent-card.json", "/.well-known/agent", "/"]


def _app() -> FastAPI:
    settings = load_agent_settings({"AGENT_NAME": "a", "MODEL_API_URL": "http://127.0.0.1:9/v1", "MODEL_NAME": "m"})
    return create_app(settings, NullMemory())


def test_every_endpoint_is_a_route_of_the_app_itself() -> None:
    # Flat on purpose: an included router is matched again on every request (see kora.agent.routes). The turns'
    # routes come first (the models' after them); A2A's card and POST / last, before the SDK has loaded, then the
    # route that holds the HTTP+JSON binding's requests until it has.
    app = _app()
    *routes, waiting = app.routes
    assert isinstance(waiting, WaitingRestRoute)
    assert all(isinstance(route, Route) for route in routes)
    assert [route.path for route in routes if route.include_in_schema is False][-4:] == CARD_AND_RPC
    assert routes[-1].path == "/"
    assert [(route.path, sorted(route.methods)) for route in app.routes if isinstance(route, APIRoute)] == [
        ("/v1/chat/completions", ["POST"]),
        ("/v1/responses", ["POST"]),
        ("/v1/responses/{response_id}", ["GET"]),
        ("/v1/responses/{response_id}/input_items", ["GET"]),
        ("/v1/responses/{response_id}", ["DELETE"]),
        ("/v1/responses/{response_id}/cancel", ["POST"]),
        ("/ag-ui", ["POST"]),
        ("/v1/models", ["GET"]),
        ("/v1/models/{model_id:path}", ["GET"]),
        ("/v1/conversations", ["POST"]),
        ("/v1/conversations/{conversation_id}", ["GET"]),
        ("/v1/conversations/{conversation_id}", ["POST"]),
        ("/v1/conversations/{conversation_id}", ["DELETE"]),
        ("/v1/conversations/{conversation_id}/items", ["GET"]),
        ("/v1/conversations/{conversation_id}/items", ["POST"]),
        ("/v1/conversations/{conversation_id}/items/{item}", ["GET"]),
        ("/v1/conversations/{conversation_id}/items/{item}", ["DELETE"]),
        ("/health", ["GET"]),
        ("/ready", ["GET"]),
        ("/tools", ["GET"]),
        ("/memory/events", ["GET"]),
        ("/memory/sessions", ["GET"]),
        ("/memory/sessions/{session_id}", ["DELETE"]),
        ("/memory/users/{user_id}", ["DELETE"]),
        ("/approvals", ["GET"]),
        ("/approvals/{approval_id}", ["POST"]),
    ]


def test_the_http_json_binding_joins_the_table_last_once_the_sdk_has_loaded() -> None:
    app = _app()
    with TestClient(app) as client:
        # The first A2A request loads the SDK (and waits for it).
        assert client.get("/.well-known/agent.json").status_code == 200
        assert hasattr(app.state, "a2a")
        paths = [getattr(route, "path", type(route).__name__) for route in app.routes]
    assert paths[paths.index("/") - 3 :] == [
        *CARD_AND_RPC,
        # Matches nothing once the SDK has loaded.
        "WaitingRestRoute",
        # The HTTP+JSON binding's, after every other route (a chat request does not try them first).
        "/message:send",
        "/message:stream",
        "/tasks/{id}:cancel",
        "/tasks/{id}:subscribe",
        "/tasks/{id}:subscribe",
        "/tasks/{id}",
        "/tasks/{id}/pushNotificationConfigs/{push_id}",
        "/tasks/{id}/pushNotificationConfigs/{push_id}",
        "/tasks/{id}/pushNotificationConfigs",
        "/tasks/{id}/pushNotificationConfigs",
        "/tasks",
        "/extendedAgentCard",
    ]


def test_openapi_operation_ids_are_stable() -> None:
    app = _app()
    operations = {
        (path, method): operation["operationId"]
        for path, item in app.openapi()["paths"].items()
        for method, operation in item.items()
    }
    assert operations == {
        ("/health", "get"): "health_health_get",
        ("/ready", "get"): "ready_ready_get",
        ("/tools", "get"): "tools_tools_get",
        ("/memory/events", "get"): "memory_events_memory_events_get",
        ("/memory/sessions", "get"): "memory_sessions_memory_sessions_get",
        ("/memory/sessions/{session_id}", "delete"): "erase_session_memory_sessions__session_id__delete",
        ("/memory/users/{user_id}", "delete"): "erase_user_memory_users__user_id__delete",
        ("/v1/chat/completions", "post"): "chat_completions_v1_chat_completions_post",
        ("/v1/models", "get"): "list_models_v1_models_get",
        ("/v1/models/{model_id}", "get"): "get_model_v1_models__model_id__get",
        ("/v1/responses", "post"): "create_response_v1_responses_post",
        ("/ag-ui", "post"): "ag_ui_run_ag_ui_post",
        ("/v1/responses/{response_id}", "get"): "retrieve_response_v1_responses__response_id__get",
        ("/v1/responses/{response_id}/input_items", "get"): (
            "list_input_items_v1_responses__response_id__input_items_get"
        ),
        ("/v1/responses/{response_id}", "delete"): "delete_response_v1_responses__response_id__delete",
        ("/v1/responses/{response_id}/cancel", "post"): "cancel_response_v1_responses__response_id__cancel_post",
        ("/v1/conversations", "post"): "create_conversation_v1_conversations_post",
        ("/v1/conversations/{conversation_id}", "get"): "retrieve_conversation_v1_conversations__conversation_id__get",
        ("/v1/conversations/{conversation_id}", "post"): (
            "update_conversation_v1_conversations__conversation_id__post"
        ),
        ("/v1/conversations/{conversation_id}", "delete"): (
            "delete_conversation_v1_conversations__conversation_id__delete"
        ),
        ("/v1/conversations/{conversation_id}/items", "get"): (
            "list_items_v1_conversations__conversation_id__items_get"
        ),
        ("/v1/conversations/{conversation_id}/items", "post"): (
            "create_items_v1_conversations__conversation_id__items_post"
        ),
        ("/v1/conversations/{conversation_id}/items/{item}", "get"): (
            "retrieve_item_v1_conversations__conversation_id__items__item__get"
        ),
        ("/v1/conversations/{conversation_id}/items/{item}", "delete"): (
            "delete_item_v1_conversations__conversation_id__items__item__delete"
        ),
        ("/approvals", "get"): "list_approvals_approvals_get",
        ("/approvals/{approval_id}", "post"): "decide_approval_approvals__approval_id__post",
    }


def test_a_request_route_serves_its_endpoint_and_refuses_one_that_declares_more() -> None:
    async def echo(request: Request) -> Response:
        return JSONResponse({"path": request.url.path, "body": (await request.body()).decode()})

    app = FastAPI()
    app.router.add_api_route("/echo", echo, methods=["POST"], route_class_override=RequestRoute)
    with TestClient(app) as client:
        answer = client.post("/echo", content=b"hi")
        assert (answer.status_code, answer.json()) == (200, {"path": "/echo", "body": "hi"})
        assert client.get("/echo").status_code == 405
    assert "/echo" in app.openapi()["paths"]

    async def with_parameter(request: Request, n: int) -> Response:
        return Response(str(n))

    with pytest.raises(TypeError, match="takes the Request alone"):
        app.router.add_api_route("/n", with_parameter, methods=["GET"], route_class_override=RequestRoute)
