"""AG-UI on an agent (``POST /ag-ui``): a ``RunAgentInput`` as the chat turn it asks for, and the turn streamed
back as AG-UI events. The types and the encoder are the protocol's own Python SDK (``ag-ui-protocol``).

What a ``RunAgentInput`` may ask, field by field (each honoured or refused with a 400, never ignored):

* ``threadId`` is the Kora session id (its rule: :mod:`kora.core.protocol`); ``runId`` and ``parentRunId`` are
  echoed on ``RUN_STARTED`` / ``RUN_FINISHED``; ``protocolVersion`` is the client's (``RUN_STARTED`` says the
  server's, :data:`ag_ui.core.PROTOCOL_VERSION`).
* ``messages`` become the Chat Completions conversation they mean (user text and images, system and developer
  instructions, assistant text and ``toolCalls``, ``tool`` results) and follow the chat endpoint's rules
  (:mod:`kora.agent.openai_api`): the last user message is the prompt, and a conversation that ends with
  ``tool`` messages answers the calls of a frontend tool that ended the previous run. A message's display fields
  (``id``, ``name``, ``metadata``) are the client's and are not shown to the model; activity and reasoning
  messages, ``encryptedValue`` and media other than images are refused.
* ``tools`` are frontend tools, run by the client: a run whose model calls one ends with that call (its
  ``TOOL_CALL_START`` / ``ARGS`` / ``END``, no result) and ``RUN_FINISHED`` names it in
  ``outcome.pendingToolCallIds``; the next run sends its result as a ``tool`` message.
* A run paused at calls of the agent's own tools that wait for a person's approval (:mod:`kora.agent.approvals`)
  finishes with ``result`` ``{"finishReason": "tool_calls", "approvals": [...]}`` (as ``GET /approvals`` lists
  them); they are decided with ``POST /approvals/{id}``, and the thread takes no other run until then.
* ``context`` entries are added to the turn's instructions (``description: value``, one a line).
* ``state``, ``forwardedProps`` and ``resume`` are refused unless empty: a Kora agent keeps no AG-UI state, reads
  no application properties and never interrupts a run. Any other field is refused.

The answer: ``RUN_STARTED``; when memory recalled anything for the turn (long-term facts, a rolling summary), a
``CUSTOM`` event named ``kora.memory_recall`` whose value is ``{"facts": [text, ...], "summary": bool}``; the text
as ``TEXT_MESSAGE_START`` / ``CONTENT`` / ``END`` (one message per stretch of text between tool calls); each call of
the agent's own tools (MCP, memory, and delegation, whose tool ``delegate_to_<peer>`` names the peer) as
``TOOL_CALL_START`` / ``ARGS`` / ``END`` as it starts and ``TOOL_CALL_RESULT`` when it returns; then
``RUN_FINISHED`` with the run's token usage, or ``RUN_ERROR`` (the error's message and Kora code) when the turn
fails after the stream started.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from ag_ui.core import (
    PROTOCOL_VERSION,
    ActivityMessage,
    AssistantMessage,
    BaseEvent,
    CustomEvent,
    DataSource,
    DeveloperMessage,
    ImagePart,
    ReasoningMessage,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    SystemMessage,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    TextPart,
    TokenUsage,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    ToolMessage,
    UrlSource,
    UserMessage,
)
from ag_ui.encoder import EventEncoder
from pydantic import BaseModel, JsonValue, ValidationError

from kora.agent.openai_api import ParsedChat, decode_body, parse_chat_body
from kora.agent.turn import Recalled, ToolCalled, ToolReturned, ToolStep, TurnOutcome
from kora.core.errors import KoraError, RequestError
from kora.core.openai_wire import invalid_request_message
from kora.core.protocol import check_session_id

if TYPE_CHECKING:
    from kora.agent.runtime import AgentRuntime
    from kora.agent.turn import TurnRequest

JSONObject = dict[str, Any]


@dataclass(frozen=True)
class AgUiRun:
    """A checked ``RunAgentInput``: the ``input`` as the SDK parsed it, and the chat turn it asks for."""

    input: RunAgentInput
    chat: ParsedChat

    @property
    def thread_id(self) -> str:
        """The run's thread: the Kora session id."""
        return self.input.thread_id


def _refuse(message: str, param: str, code: str = "unsupported_parameter") -> RequestError:
    return RequestError(message, code=code, param=param)


def _location(loc: tuple[int | str, ...]) -> str:
    """A pydantic error location as a field path in the wire's camelCase: ``messages[0].toolCallId``."""
    words: list[str] = []
    for part in loc:
        if isinstance(part, int):
            words.append(f"[{part}]")
        elif part[:1].islower():  # union branch names (``UserMessage``, ``str``) are left out
            words.append("." + re.sub(r"_([a-z])", lambda m: m.group(1).upper(), part))
    return "".join(words).lstrip(".")


def parse_run(raw: bytes) -> AgUiRun:
    """Parse and check a ``RunAgentInput`` body (see the module docstring). Raises
    :class:`~kora.core.errors.RequestError` (400) for malformed JSON, a body the SDK's ``RunAgentInput`` does
    not validate, an invalid ``threadId``, a field Kora does not honour, and everything the chat endpoint
    refuses in the conversation it means (``param`` names the AG-UI field)."""
    data = decode_body(raw)
    try:
        run = RunAgentInput.model_validate(data)
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        raise RequestError(invalid_request_message([first]), param=_location(first["loc"]) or None) from None
    check_session_id(run.thread_id, "'threadId'")
    _refuse_extras(run, "")
    for name, value in (("state", run.state), ("forwardedProps", run.forwarded_props), ("resume", run.resume)):
        if value not in (None, {}, []):
            raise _refuse(f"Unsupported parameter: '{name}' is not supported by this agent ({_WHY[name]}).", name)
    messages: list[JSONObject] = []
    for index, entry in enumerate(run.context or ()):
        _refuse_extras(entry, f"context[{index}]")
    if run.context:
        lines = [f"{entry.description}: {entry.value}" for entry in run.context]
        messages.append({"role": "system", "content": "Context from the application:\n" + "\n".join(lines)})
    offset = len(messages)
    for index, message in enumerate(run.messages):
        messages.append(_chat_message(message, f"messages[{index}]"))
    body: JSONObject = {"messages": messages}
    if run.tools:
        body["tools"] = [_chat_tool(tool.name, tool.description, tool.parameters) for tool in run.tools]
        for index, tool in enumerate(run.tools):
            _refuse_extras(tool, f"tools[{index}]")
    with _ag_ui_params(offset):
        return AgUiRun(run, parse_chat_body(body))


#: Why a field is refused unless empty.
_WHY: Final = {
    "state": "it keeps no AG-UI state",
    "forwardedProps": "it reads no application properties",
    "resume": "it never interrupts a run",
}


def _refuse_extras(model: BaseModel, where: str) -> None:
    """Refuse a field the SDK kept as an unknown extra (its models allow them)."""
    for name in model.model_extra or {}:
        param = f"{where}.{name}" if where else name
        raise _refuse(f"Unrecognized request argument supplied: {param}", param)


def _chat_message(message: Any, where: str) -> JSONObject:
    """One AG-UI message as the Chat Completions message it means."""
    if isinstance(message, ActivityMessage | ReasoningMessage):
        raise _refuse(
            f"Unsupported value: '{message.role}' messages are not supported by this agent.",
            f"{where}.role",
            "unsupported_value",
        )
    _refuse_extras(message, where)
    if getattr(message, "encrypted_value", None) is not None:
        raise _refuse(
            "Unsupported parameter: 'encryptedValue' is not supported by this agent.", f"{where}.encryptedValue"
        )
    if isinstance(message, SystemMessage | DeveloperMessage):
        return {"role": message.role, "content": message.content}
    if isinstance(message, UserMessage):
        content = message.content
        if isinstance(content, str):
            return {"role": "user", "content": content}
        return {
            "role": "user",
            "content": [_chat_part(part, f"{where}.content[{n}]") for n, part in enumerate(content)],
        }
    if isinstance(message, AssistantMessage):
        result: JSONObject = {"role": "assistant", "content": message.content}
        if message.tool_calls:
            for n, call in enumerate(message.tool_calls):
                _refuse_extras(call, f"{where}.toolCalls[{n}]")
                _refuse_extras(call.function, f"{where}.toolCalls[{n}].function")
            result["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.function.name, "arguments": c.function.arguments},
                }
                for c in message.tool_calls
            ]
        return result
    assert isinstance(message, ToolMessage)
    text = message.content if isinstance(message.content, str) else _tool_text(message.content, where)
    if message.error is not None:
        text = f"{text}\nError: {message.error}" if text else f"Error: {message.error}"
    return {"role": "tool", "tool_call_id": message.tool_call_id, "content": text}


def _tool_text(parts: list[Any], where: str) -> str:
    texts: list[str] = []
    for n, part in enumerate(parts):
        if not isinstance(part, TextPart):
            raise _refuse(
                "Unsupported value: a tool message's parts must be text for this agent.",
                f"{where}.content[{n}].type",
                "unsupported_value",
            )
        texts.append(part.text)
    return "\n".join(texts)


def _chat_part(part: Any, where: str) -> JSONObject:
    """A user message part as Chat Completions' content part: text, or an image by URL or inline data."""
    if isinstance(part, BaseModel):
        _refuse_extras(part, where)
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, ImagePart) and isinstance(part.source, UrlSource):
        return {"type": "image_url", "image_url": {"url": part.source.value}}
    if isinstance(part, ImagePart) and isinstance(part.source, DataSource):
        url = f"data:{part.source.mime_type};base64,{part.source.value}"
        return {"type": "image_url", "image_url": {"url": url}}
    kind = getattr(part, "type", "?")
    raise _refuse(
        f"Unsupported value: '{kind}' content is not supported by this agent (text, and images by URL or data).",
        f"{where}.type",
        "unsupported_value",
    )


def _chat_tool(name: str, description: str, parameters: Any) -> JSONObject:
    function: JSONObject = {"name": name, "description": description}
    if parameters is not None:
        function["parameters"] = parameters
    return {"type": "function", "function": function}


#: Chat Completions request fields as the AG-UI field they came from (``param`` of a refusal).
_PARAMS: Final = (
    (re.compile(r"^(tools\[\d+\])\.function\.?"), r"\1."),
    (re.compile(r"^(messages\[\d+\])\.tool_call_id"), r"\1.toolCallId"),
    (re.compile(r"^(messages\[\d+\])\.tool_calls"), r"\1.toolCalls"),
)


@contextmanager
def _ag_ui_params(offset: int) -> Iterator[None]:
    """Refusals raised inside name the AG-UI field, not the Chat Completions one it was translated to (a
    message's index less the ``context`` message put first)."""
    try:
        yield
    except RequestError as error:
        param = error.param
        if param is not None:
            match = re.match(r"^messages\[(\d+)\]", param)
            if match and offset:
                index = int(match.group(1)) - offset
                param = f"messages[{index}]{param[match.end() :]}" if index >= 0 else "context"
            for pattern, name in _PARAMS:
                param = pattern.sub(name, param, count=1)
            error.param = param.rstrip(".")
        raise


@contextmanager
def ag_ui_params() -> Iterator[None]:
    """:func:`parse_run`'s renaming of refused fields for checks made after parsing (the runtime's tool checks)."""
    with _ag_ui_params(0):
        yield


#: The ``CUSTOM`` event's name for what memory recalled before the turn's first model request.
MEMORY_RECALL: Final = "kora.memory_recall"


class EventWriter:
    """Turns the runtime's stream (:meth:`~kora.agent.runtime.AgentRuntime.stream_steps`) into AG-UI events for
    one run (see the module docstring)."""

    def __init__(self, run: RunAgentInput, model: str) -> None:
        self._run = run
        self._model = model
        self._message_id: str | None = None
        self._last_message_id: str | None = None
        self._called: set[str] = set()

    def started(self) -> BaseEvent:
        """``RUN_STARTED`` for the run."""
        return RunStartedEvent(
            thread_id=self._run.thread_id,
            run_id=self._run.run_id,
            parent_run_id=self._run.parent_run_id,
            protocol_version=PROTOCOL_VERSION,
        )

    def item(self, item: str | ToolStep | TurnOutcome) -> Iterator[BaseEvent]:
        """The events one item of the turn's stream makes."""
        if isinstance(item, str):
            if item:
                if self._message_id is None:
                    self._message_id = self._last_message_id = _new_id("msg")
                    yield TextMessageStartEvent(message_id=self._message_id, role="assistant")
                yield TextMessageContentEvent(message_id=self._message_id, delta=item)
        elif isinstance(item, ToolCalled):
            yield from self._call(item.tool_call_id, item.name, item.arguments)
        elif isinstance(item, ToolReturned):
            yield from self._end_text()
            yield ToolCallResultEvent(
                message_id=_new_id("tool"), tool_call_id=item.tool_call_id, content=item.content, role="tool"
            )
        elif isinstance(item, Recalled):
            yield CustomEvent(name=MEMORY_RECALL, value={"facts": list(item.facts), "summary": item.summary})
        else:
            yield from self._end_text()
            for call in item.tool_calls:
                if call.tool_call_id not in self._called:
                    yield from self._call(call.tool_call_id, call.name, call.arguments)
            pending = [call.tool_call_id for call in item.tool_calls]
            result: dict[str, JsonValue] | None = None
            if item.finish_reason == "length":
                result = {"finishReason": "length"}
            elif item.approvals:
                # The run paused at calls waiting for a person's approval (decided over POST /approvals/{id}).
                result = {"finishReason": "tool_calls", "approvals": [a.to_json() for a in item.approvals]}
            usage = TokenUsage(
                model=self._model,
                input_tokens=item.input_tokens,
                output_tokens=item.output_tokens,
                total_tokens=item.input_tokens + item.output_tokens,
            )
            yield RunFinishedEvent(
                thread_id=self._run.thread_id,
                run_id=self._run.run_id,
                outcome=RunFinishedSuccessOutcome(pending_tool_call_ids=pending) if pending else None,
                # A run a limit cut short (a step budget or another budget: its message was the text) says so.
                result=result,
                usage=[usage],
            )

    def failed(self, error: KoraError) -> Iterator[BaseEvent]:
        """``RUN_ERROR`` for a turn that failed after the stream started (an open text message is ended first)."""
        yield from self._end_text()
        yield RunErrorEvent(message=error.message, code=error.code)

    def _end_text(self) -> Iterator[BaseEvent]:
        if self._message_id is not None:
            yield TextMessageEndEvent(message_id=self._message_id)
            self._message_id = None

    def _call(self, tool_call_id: str, name: str, arguments: str) -> Iterator[BaseEvent]:
        yield from self._end_text()
        self._called.add(tool_call_id)
        yield ToolCallStartEvent(
            tool_call_id=tool_call_id, tool_call_name=name, parent_message_id=self._last_message_id
        )
        yield ToolCallArgsEvent(tool_call_id=tool_call_id, delta=arguments or "{}")
        yield ToolCallEndEvent(tool_call_id=tool_call_id)


def _new_id(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex}"


async def run_events(runtime: AgentRuntime, turn: TurnRequest, run: AgUiRun, model: str) -> AsyncIterator[str]:
    """The run's events as server-sent events (the SDK's encoder), from ``RUN_STARTED`` to ``RUN_FINISHED`` or
    ``RUN_ERROR``. Closing the iterator (a client that went away) stops the turn as the chat endpoint's stream
    does."""
    encoder = EventEncoder()
    writer = EventWriter(run.input, model)
    yield encoder.encode(writer.started())
    stream = runtime.stream_steps(turn, checked=True)  # the route refused a session that waits
    try:
        async for item in stream:
            for event in writer.item(item):
                yield encoder.encode(event)
    except KoraError as failure:
        for event in writer.failed(failure):
            yield encoder.encode(event)
    finally:
        await stream.aclose()
