"""What Kora adds in front of the SDK's JSON-RPC endpoint (docs/a2a.md "Methods"):
JSON-RPC 2.0 envelope rules the SDK does not cover, parameter checks, and the legacy method
names.

* Envelope: a body that is not JSON is a parse error (-32700); a non-object request or an empty batch is an
  invalid request (-32600); a batch (JSON array) is answered with an array holding one response per request
  that has an ``id``; a valid notification (no ``id``) is executed and gets no response (HTTP 204 when nothing
  is left to answer), while an invalid Request without ``id`` (no ``"jsonrpc": "2.0"``, no method) is answered
  -32600 with ``id`` null. Streaming methods cannot be batched (their answer is an SSE stream): -32600 per entry.
* Versions (:mod:`.negotiation`): a 0.3 or legacy method asked for in 1.0 is -32601; errors take the shape of the
  request's version.
* Parts: text parts as they are, data parts for the model as JSON text (:func:`.executor.prompt_of`); a file
  part is -32005 (content type not supported), or -32602 when its bytes are not base64; a message with no text
  or data is -32602 (never an empty-prompt turn). ``ListTasks``' ``status`` must be a task state (-32602).
* Null ids: JSON-RPC 2.0 allows ``"id": null`` (answered with ``id`` null); the SDK's 0.3 layer refuses it, so
  the SDK gets a placeholder id, swapped back in the answer. Notifications get one too: they are executed (a
  send non-blocking, so the 204 does not wait for the turn), and their answer is dropped.
* Parameter checks: the SDK reports malformed params as -32600 with a validation dump (or a 500 for some
  wrongly typed fields); Kora checks params against the SDK's own schema first, so they are -32602 (invalid
  params) as JSON-RPC 2.0 defines, with a short message naming the field. Strings must be storable text and a
  ``contextId``/``sessionId`` a session id (:mod:`kora.core.protocol`), else -32602 before any work.
* Legacy names: ``tasks/send`` is ``message/send`` with ``blocking`` false (it returns at once with the task
  ``submitted``/``working``) and ``tasks/sendSubscribe`` is ``message/stream``. Their params are translated:
  parts' ``type`` -> ``kind``, ``sessionId`` -> the message's ``contextId``, a ``messageId`` is added, and a
  client-chosen task ``id`` becomes the task's id. Results of legacy calls also carry ``sessionId`` and parts'
  ``type`` so old clients find the names they sent.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from a2a.compat.v0_3.jsonrpc_adapter import JSONRPC03Adapter
from a2a.server.id_generator import IDGenerator, IDGeneratorContext
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.types.a2a_pb2 import TaskState
from google.protobuf.json_format import ParseDict, ParseError  # type: ignore[import-untyped]
from google.protobuf.message import Message as ProtoMessage  # type: ignore[import-untyped]
from pydantic import BaseModel, ValidationError

from kora.agent.a2a.negotiation import V03, V1, error_object
from kora.agent.a2a.requested import requested_task_id
from kora.agent.budget import BUDGET_METADATA, Limits
from kora.core.errors import (
    ContentTypeNotSupported,
    InvalidJSON,
    InvalidRPCRequest,
    KoraError,
    MethodNotFound,
    RequestError,
)
from kora.core.protocol import check_session_id
from kora.core.text import UNSTORABLE, UNSTORABLE_MESSAGE, unstorable_location

JsonObject = dict[str, Any]

#: Legacy method -> (A2A 0.3 method, force non-blocking).
LEGACY_METHODS: dict[str, tuple[str, bool]] = {
    "tasks/send": ("message/send", True),
    "tasks/sendSubscribe": ("message/stream", False),
}
MESSAGE_METHODS = frozenset({"message/send", "message/stream"})
TASK_ID_METHODS = frozenset({"tasks/get", "tasks/cancel", "tasks/resubscribe"})
STREAMING_METHODS = frozenset(
    {"message/stream", "tasks/resubscribe", "tasks/sendSubscribe", "SendStreamingMessage", "SubscribeToTask"}
)
#: Methods whose notification has nothing to execute (they only subscribe to a task's events).
SUBSCRIBE_METHODS = frozenset({"tasks/resubscribe", "SubscribeToTask"})
#: A2A 1.0 method -> the protobuf message its params are parsed into (the SDK's own table).
V1_MODELS: dict[str, type[ProtoMessage]] = JsonRpcDispatcher.METHOD_TO_MODEL
V1_METHODS = frozenset(V1_MODELS)
V1_SEND_METHODS = frozenset({"SendMessage", "SendStreamingMessage"})
#: A2A 0.3 method -> the pydantic model of its whole request (the SDK's own table).
V03_MODELS: dict[str, type[BaseModel]] = JSONRPC03Adapter.METHOD_TO_MODEL  # type: ignore[assignment]
# pydantic puts union members' class names (TextPart, FilePart) in locations; JSON field names are camelCase.
_MODEL_NAME = re.compile(r"[A-Z][A-Za-z0-9]*")


class RequestedTaskIdGenerator(IDGenerator):
    """Task ids: the one a legacy ``tasks/send`` named (see :data:`requested_task_id`), else a UUID4, which
    ``on_new`` (when given) is told of: no task can have it before this server stores one."""

    def __init__(self, on_new: Callable[[str], None] | None = None) -> None:
        self._on_new = on_new

    def generate(self, context: IDGeneratorContext) -> str:
        """A new task id (string)."""
        requested = requested_task_id.get()
        if requested:
            return requested
        task_id = str(uuid.uuid4())
        if self._on_new is not None:
            self._on_new(task_id)
        return task_id


def error_response(request_id: object, error: KoraError, version: str = V03) -> JsonObject:
    """A JSON-RPC 2.0 error response object for ``error``, in the shape clients of A2A ``version`` read
    (:func:`kora.agent.a2a.negotiation.error_object`)."""
    return {"jsonrpc": "2.0", "id": request_id, "error": error_object(error, version)}


def parse_body(body: bytes) -> object:
    """The decoded JSON body; raises :class:`~kora.core.errors.InvalidJSON` (-32700) when it is not JSON. (Depth
    and number limits were enforced on the bytes by :class:`kora.core.limits.RequestLimits`.)"""
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise InvalidJSON("Parse error: the body is not valid JSON") from None


def request_id_of(request: object) -> object:
    """The ``id`` to echo in an error for ``request`` (``None`` when absent, null or not a valid id)."""
    if isinstance(request, dict):
        value = request.get("id")
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and UNSTORABLE.search(value) is None:
            return value
    return None


def is_notification(request: object) -> bool:
    """True for a request object without ``id``: JSON-RPC 2.0 sends no response to it, as long as it is a valid
    Request (an invalid one, e.g. without ``"jsonrpc": "2.0"``, is answered -32600 with ``id`` null)."""
    return isinstance(request, dict) and "id" not in request


@dataclass(frozen=True)
class Prepared:
    """A request ready for the SDK: ``body`` (0.3 names), ``legacy`` (answer in legacy shape), the task id a
    legacy client chose (``None`` when it chose none), ``answer_id`` (the id the answer carries) and
    ``placeholder`` (the id the SDK was given instead of a null or missing one, else ``None``: the SDK's 0.3
    layer refuses both). ``skip``: a notification with nothing to execute (subscribing to a task)."""

    body: JsonObject
    legacy: bool
    task_id: str | None
    answer_id: object = None
    placeholder: str | None = None
    skip: bool = False


def prepare(request: object, version: str = V03) -> Prepared:
    """Check one request of A2A ``version`` (:mod:`.negotiation`) and translate legacy names; raises
    :class:`~kora.core.errors.InvalidRPCRequest` (-32600) for a bad envelope,
    :class:`~kora.core.errors.MethodNotFound` (-32601) for a 0.3 method asked for in 1.0,
    :class:`~kora.core.errors.RequestError` (-32602) for bad params (a file part's bytes that are not base64, a
    ``ListTasks`` filter that is not a task state, a message with no content) and
    :class:`~kora.core.errors.ContentTypeNotSupported` (-32005) for a file part (the model takes text:
    text parts as they are, data parts as JSON text).

    Params of every method the SDK serves are checked against the SDK's own schema here, so a wrongly typed
    field is -32602 with a short message naming it (the SDK would answer -32600 with a validation dump).
    Strings anywhere in params must be storable (no NUL, no lone surrogate), and a message's ``contextId``
    must be a session id (:func:`kora.core.protocol.check_session_id`). A notification of a send method runs
    non-blocking, so its HTTP answer does not wait for the turn. Unknown methods pass through: the SDK answers
    them with -32601.
    """
    if not isinstance(request, dict):
        raise InvalidRPCRequest("Invalid request: a request must be a JSON object")
    if request.get("jsonrpc") != "2.0":
        raise InvalidRPCRequest("Invalid request: 'jsonrpc' must be exactly '2.0'")
    method = request.get("method")
    if not isinstance(method, str) or not method or UNSTORABLE.search(method):
        raise InvalidRPCRequest("Invalid request: 'method' must be a non-empty string")
    if request.get("id") is not None and request_id_of(request) is None:
        raise InvalidRPCRequest("Invalid request: 'id' must be a string, an integer or null")
    notification = "id" not in request
    if version == V1 and method not in V1_METHODS:
        raise MethodNotFound(f"Method not found: {method[:80]!r} is not an A2A 1.0 method")
    params = request.get("params", {})
    legacy = method in LEGACY_METHODS
    if (method in MESSAGE_METHODS or legacy or method in TASK_ID_METHODS or method in V1_METHODS) and not isinstance(
        params, dict
    ):
        raise RequestError("Invalid params: 'params' must be an object")
    bad_text = unstorable_location(params)
    if bad_text is not None:
        raise RequestError(f"Invalid params: {_shorten(bad_text) or 'params'}: {UNSTORABLE_MESSAGE}")
    task_id: str | None = None
    if legacy:
        params, task_id = _legacy_params(params, non_blocking=LEGACY_METHODS[method][1])
        method = LEGACY_METHODS[method][0]
    if method in MESSAGE_METHODS or method in V1_SEND_METHODS:
        _check_message(params)
        role = params["message"].get("role")
        if method in MESSAGE_METHODS and not (isinstance(role, str) and role in {"user", "agent"}):
            raise RequestError("Invalid params: 'message.role' must be 'user' or 'agent'")
        _check_parts(params["message"]["parts"], v1=method in V1_SEND_METHODS)
    elif method in TASK_ID_METHODS and not (isinstance(params.get("id"), str) and params["id"]):
        raise RequestError("Invalid params: 'id' (task id string) is required")
    if method in TASK_ID_METHODS or method in MESSAGE_METHODS:
        _check_history_length(params)
    elif method == "ListTasks":
        check_task_state(params.get("status"))
    if notification:
        method, params = _run_without_answer(method, params)
    placeholder = None if request.get("id") is not None else f"kora-unnamed-{uuid.uuid4().hex}"
    body = {"jsonrpc": "2.0", "id": placeholder or request["id"], "method": method, "params": params}
    _check_schema(method, body)
    return Prepared(
        body,
        legacy,
        task_id,
        answer_id=request.get("id"),
        placeholder=placeholder,
        skip=notification and method in SUBSCRIBE_METHODS,
    )


def _run_without_answer(method: str, params: JsonObject) -> tuple[str, JsonObject]:
    """A notification's method and params: a send runs non-blocking (nobody waits for its answer)."""
    if method in {"message/send", "message/stream"}:
        configuration = params.get("configuration") or {}
        return "message/send", {**params, "configuration": {**configuration, "blocking": False}}
    if method in V1_SEND_METHODS:
        configuration = params.get("configuration") or {}
        return "SendMessage", {**params, "configuration": {**configuration, "returnImmediately": True}}
    return method, params


def _check_message(params: JsonObject) -> None:
    message = params.get("message")
    if not isinstance(message, dict):
        raise RequestError("Invalid params: 'message' (object) is required")
    parts = message.get("parts")
    if not isinstance(parts, list) or not parts or not all(isinstance(p, dict) for p in parts):
        raise RequestError("Invalid params: 'message.parts' must be a non-empty list of objects")
    if not isinstance(message.get("messageId"), str):
        raise RequestError("Invalid params: 'message.messageId' (string) is required")
    context_id = message.get("contextId")
    if context_id is not None:
        check_session_id(context_id, "'message.contextId'")
    _check_configuration(params.get("configuration"))
    metadata = message.get("metadata")
    if isinstance(metadata, dict) and BUDGET_METADATA in metadata:
        Limits.from_metadata(metadata[BUDGET_METADATA])  # a budget from a delegating agent must be readable


def _check_configuration(configuration: object) -> None:
    """A 0.3 send's ``configuration``: absent, or an object whose ``blocking`` is absent, null or a JSON boolean.
    Raises :class:`~kora.core.errors.RequestError` (-32602) naming the field otherwise: the SDK's 0.3 model would
    read ``"yes"`` or ``1`` as true (A2A 1.0's parser refuses ``returnImmediately: "yes"``)."""
    if configuration is None:
        return
    if not isinstance(configuration, dict):
        raise RequestError("Invalid params: 'configuration' must be an object")
    blocking = configuration.get("blocking")
    if blocking is not None and not isinstance(blocking, bool):
        raise RequestError("Invalid params: configuration.blocking: must be a boolean (true or false)")


#: Base64 as protobuf's JSON parser reads it (standard or URL-safe alphabet, padding optional).
_BASE64 = re.compile(r"[A-Za-z0-9+/_-]*={0,2}")


def _check_base64(value: object, where: str) -> None:
    if not isinstance(value, str) or not _BASE64.fullmatch(value):
        raise RequestError(f"Invalid params: {where}: not base64")
    try:
        base64.urlsafe_b64decode(
            value.replace("+", "-").replace("/", "_").rstrip("=") + "=" * (-len(value.rstrip("=")) % 4)
        )
    except (binascii.Error, ValueError):
        raise RequestError(f"Invalid params: {where}: not base64") from None


def _check_parts(parts: list[JsonObject], v1: bool) -> None:
    """A message's parts: a file part is refused (-32602 when its bytes are not base64, else -32005: the model
    takes text); the message must have some content (a non-empty text part or a data part)."""
    content = False
    for index, part in enumerate(parts):
        where = f"message.parts.{index}"
        if v1:
            is_file = "raw" in part or "url" in part
            if "raw" in part:
                _check_base64(part["raw"], f"{where}.raw")
            media_type = part.get("mediaType") or part.get("media_type")
        else:
            named = part.get("type")  # the legacy name of ``kind``: kept only when it agrees
            if named is not None and named != part.get("kind", "text"):
                raise RequestError(f"Invalid params: {where}.type: {str(named)[:40]!r} is not this part's kind")
            is_file = part.get("kind") == "file"
            file = part.get("file")
            if is_file and isinstance(file, dict) and "bytes" in file:
                _check_base64(file["bytes"], f"{where}.file.bytes")
            media_type = file.get("mimeType") if isinstance(file, dict) else None
        if is_file:
            kind = f" ({media_type[:80]})" if isinstance(media_type, str) and media_type else ""
            raise ContentTypeNotSupported(
                f"Content type not supported: {where} is a file part{kind}; this agent accepts text and JSON data"
            )
        text = part.get("text")
        if (isinstance(text, str) and text.strip()) or "data" in part:
            content = True
    if not content:
        raise RequestError("Invalid params: message.parts: the message has no text or data to answer")


#: The largest ``historyLength`` (the SDK carries it as a protobuf int32).
MAX_HISTORY_LENGTH = 2**31 - 1


def _check_history_length(params: JsonObject) -> None:
    """A 0.3 ``historyLength`` (of ``tasks/get`` or a send's ``configuration``) that is an integer must fit the
    SDK's int32 (1.0's protobuf parser refuses a larger one itself); other wrong values are the schema's to
    refuse."""
    configuration = params.get("configuration")
    for where, value in (
        ("historyLength", params.get("historyLength")),
        (
            "configuration.historyLength",
            configuration.get("historyLength") if isinstance(configuration, dict) else None,
        ),
    ):
        if isinstance(value, int) and not isinstance(value, bool) and not 0 <= value <= MAX_HISTORY_LENGTH:
            raise RequestError(f"Invalid params: {where}: must be between 0 and {MAX_HISTORY_LENGTH}")


def check_task_state(status: object) -> None:
    """Raise :class:`~kora.core.errors.RequestError` (-32602) unless a ``ListTasks`` ``status`` filter (absent,
    or a task state's name or number) names a task state: protobuf's parser would drop an unknown one."""
    if status is None:
        return
    states = {value.name: value.number for value in TaskState.DESCRIPTOR.values if value.number != 0}
    names = list(states)
    if isinstance(status, str) and status in states:
        return
    if isinstance(status, int) and not isinstance(status, bool) and status in states.values():
        return
    raise RequestError(f"Invalid params: status: must be one of {', '.join(names)}")


def _check_schema(method: str, body: JsonObject) -> None:
    """Validate ``body`` as the SDK will: its 0.3 pydantic model, or its 1.0 protobuf message for params."""
    v03_model = V03_MODELS.get(method)
    if v03_model is not None:
        try:
            v03_model.model_validate(body)
        except ValidationError as error:
            raise RequestError(_readable(error)) from None
        return
    v1_model = V1_MODELS.get(method)
    if v1_model is not None:
        try:
            ParseDict(body["params"], v1_model(), ignore_unknown_fields=True)
        except (ParseError, ValueError, TypeError) as error:
            fields = ".".join(re.findall(r"Failed to parse (\w+) field", str(error)))
            raise RequestError(f"Invalid params: {fields or 'params'}: wrong type or value") from None


def _readable(error: ValidationError) -> str:
    """The first of pydantic's errors as ``Invalid params: <field path>: <what is wrong>``, without the SDK's
    model names (union members appear in pydantic's locations and messages)."""
    errors = error.errors(include_url=False)
    # A part's union reports every member; the members whose ``kind`` does not match are not what was meant.
    other_kinds = {tuple(e["loc"][:-1]) for e in errors if e["type"] == "literal_error" and e["loc"][-1:] == ("kind",)}
    meant = [e for e in errors if not any(tuple(e["loc"][: len(kind)]) == kind for kind in other_kinds)]
    first = (meant or errors)[0]
    where = ".".join(str(part) for part in first["loc"] if not _MODEL_NAME.fullmatch(str(part)))
    where = where.removeprefix("params.").removeprefix("params") or "params"
    what = str(first["msg"]).split(" or instance of ")[0]
    return f"Invalid params: {_shorten(where)}: {what}"


def _shorten(where: str) -> str:
    return where if len(where) <= 120 else f"{where[:60]}...{where[-60:]}"


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
        new_message["contextId"] = check_session_id(context_id, "'sessionId'")
    task_id = params.get("id")
    if task_id is not None and not isinstance(task_id, str):
        raise RequestError("Invalid params: 'id' must be a string")
    configuration = params.get("configuration")
    _check_configuration(configuration)  # before tasks/send's own blocking: false replaces a wrongly typed one
    metadata = message.get("metadata")
    if isinstance(metadata, dict) and BUDGET_METADATA in metadata:
        Limits.from_metadata(metadata[BUDGET_METADATA])  # a budget from a delegating agent must be readable
    configuration = dict(configuration or {})
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
