"""Helpers for A2A tests: the official a2a-sdk client, and raw JSON-RPC over httpx."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory, create_client
from a2a.client.client import Client
from a2a.helpers.proto_helpers import new_data_part, new_text_part
from a2a.types.a2a_pb2 import Message, Role, SendMessageRequest, Task


async def sdk_client(
    url: str,
    *,
    streaming: bool = False,
    http: httpx.AsyncClient | None = None,
    version: str | None = None,
    binding: str | None = None,
) -> Client:
    """An a2a-sdk client for the agent at ``url``, resolved from its card (as real clients do): the card's best
    interface (1.0 when offered), or only its interfaces of A2A ``version`` (``"1.0"``, ``"0.3"``) when given, so a
    test can speak 0.3 to an agent that offers both; ``binding`` (``"JSONRPC"``, ``"HTTP+JSON"``) picks the
    protocol binding (default: the SDK's preference, JSON-RPC)."""
    http = http or httpx.AsyncClient(timeout=30)
    config = ClientConfig(streaming=streaming, httpx_client=http)
    if binding is not None:
        config.supported_protocol_bindings = [binding]
    if version is None:
        return await create_client(url, client_config=config)
    card = await A2ACardResolver(http, url).get_agent_card()
    kept = [i for i in card.supported_interfaces if i.protocol_version.startswith(version)]
    assert kept, f"the card offers no interface at {version}"
    del card.supported_interfaces[:]
    card.supported_interfaces.extend(kept)
    return ClientFactory(config).create(card)


def user_message(text: str, context_id: str | None = None) -> SendMessageRequest:
    message = Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()), parts=[new_text_part(text)])
    if context_id:
        message.context_id = context_id
    return SendMessageRequest(message=message)


def rpc_body(method: str, params: Any = None, id_: Any = 1) -> dict[str, Any]:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": id_, "method": method}
    if params is not None:
        body["params"] = params
    return body


def message_params(text: str, context_id: str | None = None, blocking: bool | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "user",
        "messageId": str(uuid.uuid4()),
        "parts": [{"kind": "text", "text": text}],
    }
    if context_id:
        message["contextId"] = context_id
    params: dict[str, Any] = {"message": message}
    if blocking is not None:
        params["configuration"] = {"blocking": blocking}
    return params


def legacy_params(text: str, session_id: str | None = None, task_id: str | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"message": {"role": "user", "parts": [{"type": "text", "text": text}]}}
    if session_id:
        params["sessionId"] = session_id
    if task_id:
        params["id"] = task_id
    return params


def decision_message(task: Task, decision: dict[str, Any]) -> SendMessageRequest:
    """The next message on an ``input-required`` ``task``: an approval ``decision`` as a data part."""
    message = Message(
        role=Role.ROLE_USER,
        message_id=str(uuid.uuid4()),
        task_id=task.id,
        context_id=task.context_id,
        parts=[new_data_part(decision)],
    )
    return SendMessageRequest(message=message)


async def send(client: Client, request: SendMessageRequest) -> Task:
    """Send ``request`` with the SDK ``client`` (not streaming); the task of its one response."""
    (response,) = [r async for r in client.send_message(request)]
    return response.task
