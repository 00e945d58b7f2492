"""What Kora adds in front of the SDK's JSON-RPC endpoint (spec: "Endpoints / Agent server" item 7,
"Task (A2A)"): JSON-RPC 2.0 envelope rules the SDK does not cover, parameter checks, and the legacy method
names.

* Envelope: a body that is not JSON is a parse error (-32700); a non-object request or an empty batch is an
  invalid request (-32600); a batch (JSON array) is answered with an array holding one response per request
  that has an ``id``; a notification (no ``id``) is executed and gets no response (HTTP 204 when nothing is
  left to answer). Streaming methods cannot be batched (their answer is an SSE stream): -32600 per entry.
* Parameter checks: the SDK's 0.3 layer reports malformed params as -32600; Kora checks the shape first so
  they are -32602 (invalid params) as JSON-RPC 2.0 defines.
* Legacy names: ``tasks/send`` is ``message/send`` with ``blocking`` false (it returns at once with the task
  ``submitted``/``working``) and ``tasks/sendSubscribe`` is ``message/stream``. Their params are translated:
  parts' ``type`` -> ``kind``, ``sessionId`` -> the message's ``contextId``, a ``messageId`` is added, and a
  client-chosen task ``id`` becomes the task's id. Results of legacy calls also carry ``sessionId`` and parts'
  ``type`` so old clients find the names they sent.
"""

from __future__ import annotations

import json
import uuid
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from a2a.server.id_generator import IDGenerator, IDGeneratorContext

from kora.core.errors import InvalidJSON, InvalidRPCRequest, KoraError, RequestError, jsonrpc_error

JsonObject = dict[str, Any]

#: Legacy method -> (A2A 0.3 method, force non-blocking).
LEGACY_METHODS: dict[str, tuple[str, bool]] = {
    "tasks/send": ("message/send", True),
    "tasks/sendSubscribe": ("message/stream", False),
}
MESSAGE_METHODS = frozenset({"message/send", "message/stream"})
TASK_ID_METHODS = frozenset({"tasks/get", "tasks/cancel", "tasks/resubscribe"})
STREAMING_METHODS = frozenset({"message/stream", "tasks/resubscribe", "tasks/sendSubscribe"})

#: Task id a legacy ``tasks/send`` asked for, read by :class:`RequestedTaskIdGenerator` in the same request.
requested_task_id: ContextVar[str | None] = ContextVar("kora_a2a_requested_task_id", default=None)


class RequestedTaskIdGenerator(IDGenerator):
    """Task ids: the one a legacy ``tasks/send`` named (see :data:`requested_task_id`), else a UUID4."""

    def generate(self, context: IDGeneratorContext) -> str:
        """A new task id (string)."""
        return requested_task_id.get() or str(uuid.uuid4())


def error_response(request_id: object, error: KoraError) -> JsonObject:
    """A JSON-RPC 2.0 error response object for ``error`` (see :func:`kora.core.errors.jsonrpc_error`)."""
    return {"jsonrpc": "2.0", "id": request_id, "error": jsonrpc_error(error)}


def parse_body(body: bytes) -> object:
    """The decoded JSON body; raises :class:`~kora.core.errors.InvalidJSON` (-32700) when it is not JSON."""
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as error:
        raise InvalidJSON(f"Parse error: {error}") from None


def request_id_of(request: object) -> object:
    """The ``id`` to echo in an error for ``request`` (``None`` when absent or not a valid id)."""
    if isinstance(request, dict):
        value = request.get("id")
        if isinstance(value, str | int) and not isinstance(value, bool):
            return value
    return None


def is_notification(request: object) -> bool:
    """True for a well-formed request object without ``id``: JSON-RPC 2.0 sends no response to it."""
    return isinstance(request, dict) and "id" not in request and isinstance(request.get("method"), str)


@dataclass(frozen=True)
class Prepared:
    """A request ready for the SDK: ``body`` (0.3 names), ``legacy`` (answer in legacy shape) and the task
    id a legacy client chose (``None`` when it chose none)."""

    body: JsonObject
    legacy: bool
    task_id: str | None


def prepare(request: object) -> Prepared:
    """Check one request and translate legacy names; raises :class:`~kora.core.errors.InvalidRPCRequest` (-32600) or
    :class:`~kora.core.errors.RequestError` (-32602).

    Unknown methods pass through: the SDK answers them with -32601.
    """
    if not isinstance(request, dict):
        raise InvalidRPCRequest("Invalid request: a request must be a JSON object")
    if request.get("jsonrpc") != "2.0":
        raise InvalidRPCRequest("Invalid request: 'jsonrpc' must be exactly '2.0'")
    method = request.get("method")
    if not isinstance(method, str) or not method:
        raise InvalidRPCRequest("Invalid request: 'method' must be a non-empty string")
    if "id" in request and request_id_of(request) is None and request["id"] is not None:
        raise InvalidRPCRequest("Invalid request: 'id' must be a string, an integer or null")
    params = request.get("params", {})
    legacy = method in LEGACY_METHODS
    if (method in MESSAGE_METHODS or legacy or method in TASK_ID_METHODS) and not isinstance(params, dict):
        raise RequestError("Invalid params: 'params' must be an object")
    task_id: str | None = None
    if legacy:
        params, task_id = _legacy_params(params, non_blocking=LEGACY_METHODS[method][1])
        method = LEGACY_METHODS[method][0]
    if method in MESSAGE_METHODS:
        _check_message(params)
    elif method in TASK_ID_METHODS and not (isinstance(params.get("id"), str) and params["id"]):
        raise RequestError("Invalid params: 'id' (task id string) is required")
    body = {"jsonrpc": "2.0", "id": request.get("id"), "method": method, "params": params}
    return Prepared(body, legacy, task_id)


def _check_message(params: JsonObject) -> None:
    message = params.get("message")
    if not isinstance(message, dict):
        raise RequestError("Invalid params: 'message' (object) is required")
    if message.get("role") not in {"user", "agent"}:
        raise RequestError("Invalid params: 'message.role' must be 'user' or 'agent'")
    parts = message.get("parts")
    if not isinstance(parts, list) or not parts or not all(isinstance(p, dict) for p in parts):
        raise RequestError("Invalid params: 'message.parts' must be a non-empty list of objects")
    if not isinstance(message.get("messageId"), str):
        raise RequestError("Invalid params: 'message.messageId' (string) is required")
    configuration = params.get("configuration")
    if configuration is not None and not isinstance(configuration, dict):
        raise RequestError("Invalid params: 'configuration' must be an object")


def _legacy_params(params: JsonObject, non_blocking: bool) -> tuple[JsonObject, str | None]:
    """Legacy ``tasks/send`` params -> ``message/send`` params (see the module docstring)."""
    message = params.get("message")
    if not isinstance(message, dict):
        raise RequestError("Invalid params: 'message' (object) is required")
    parts = message.get("parts")
    if not isinstance(parts, list):
        raise RequestError("Invalid params: 'message.parts' must be a list")
    new_parts = []
    for part in parts:
        if not isinstance(part, dict):
            raise RequestError("Invalid params: each part must be an object")
        part = dict(part)
        kind = part.pop("type", None)
        part.setdefault("kind", kind or "text")
        new_parts.append(part)
    new_message = {key: value for key, value in message.items() if key != "parts"}
    new_message["parts"] = new_parts
    new_message.setdefault("messageId", str(uuid.uuid4()))
    new_message.setdefault("kind", "message")
    context_id = params.get("sessionId") or params.get("contextId") or message.get("contextId")
    if context_id is not None:
        if not isinstance(context_id, str):
            raise RequestError("Invalid params: 'sessionId' must be a string")
        new_message["contextId"] = context_id
    task_id = params.get("id")
    if task_id is not None and not isinstance(task_id, str):
        raise RequestError("Invalid params: 'id' must be a string")
    configuration = dict(params.get("configuration") or {})
    if non_blocking:
        configuration["blocking"] = False
    new_params: JsonObject = {"message": new_message}
    if configuration:
        new_params["configuration"] = configuration
    if isinstance(params.get("metadata"), dict):
        new_params["metadata"] = params["metadata"]
    return new_params, task_id or None


def legacy_result(value: Any) -> Any:
    """A result in the shape legacy clients read: ``sessionId`` next to ``contextId``, ``type`` next to
    ``kind`` in parts (recursively; other fields unchanged)."""
    if isinstance(value, list):
        return [legacy_result(item) for item in value]
    if not isinstance(value, dict):
        return value
    result = {key: legacy_result(item) for key, item in value.items()}
    if "contextId" in result and "sessionId" not in result:
        result["sessionId"] = result["contextId"]
    if result.get("kind") in {"text", "file", "data"} and "type" not in result:
        result["type"] = result["kind"]
    return result
