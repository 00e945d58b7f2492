"""The ModelAPI as a pydantic-ai ``Model``: Kora's one model adapter: the model at
``MODEL_API_URL`` named ``MODEL_NAME``, its failures mapped to Kora's errors (:mod:`kora.core.errors`).

:class:`KoraChatModel` speaks OpenAI chat completions through Kora's own HTTP client
(:class:`~kora.agent.model_client.ModelClient`: aiohttp, streams read by ``httpx2.EventSource``; one retry policy,
one error mapping) and implements pydantic-ai's ``Model`` interface (``request`` and ``request_stream``). The same
object serves every model request of a turn: the runtime calls it directly for a turn's first request, and pydantic-ai's
``Agent`` calls it for every later step. So answer parsing, retries, error mapping, the ``finish_reason``
mapping and, later, model spans exist once.

Request mapping (pydantic-ai messages -> OpenAI ``messages``), as pydantic-ai's own ``OpenAIChatModel`` maps
them for text agents (``tests/agent/test_model_wire_equivalence.py`` compares the two on generated
histories):

* one ``system`` message per instruction part, then the history;
* user prompts as ``user`` messages (text, or text and image parts), system prompts as ``system`` messages;
* tool returns as ``tool`` messages with pydantic-ai's rendering of the return (``model_response_str``);
  returns answering the calls of the response just before come in the order of those calls;
* consecutive responses merged into one ``assistant`` message, texts joined by a blank line, tool calls with
  their arguments as JSON text;
* ``tools`` (schemas adapted by the OpenAI model profile, non-strict: many OpenAI-compatible servers reject
  strict schemas) and ``tool_choice`` only when tools are offered;
* the request's ``ModelSettings`` (a client's sampling fields, :func:`settings_body`) as OpenAI's fields.

Content Kora's agents never produce (files, audio, thinking, provider-native tools) raises
:class:`~kora.core.errors.RequestError` rather than being dropped silently.

Every request is observed by :class:`~kora.agent.telemetry.ModelRequests`: the GenAI client metrics (duration,
token usage) always, a ``chat {model}`` span when tracing is on.

Errors: :class:`~kora.core.errors.ModelError` (the model API failed or sent an invalid answer) and
:class:`~kora.core.errors.ModelTimeout`.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, cast

from pydantic import JsonValue
from pydantic_ai import RunContext
from pydantic_ai.messages import (
    FinishReason,
    ImageUrl,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ModelResponsePart,
    ModelResponseStreamEvent,
    SystemPromptPart,
    TextContent,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model, ModelRequestParameters, StreamedResponse
from pydantic_ai.profiles import merge_profile
from pydantic_ai.profiles.openai import OpenAIModelProfile, openai_model_profile
from pydantic_ai.settings import ModelSettings
from pydantic_ai.usage import RequestUsage

from kora.agent.budget import TURN_DEADLINE, each_in_time, in_time
from kora.agent.model_client import ModelClient
from kora.agent.telemetry import PROVIDER, ModelRequests
from kora.core.errors import RequestError
from kora.core.openai_wire import (
    ChatCompletionChunk,
    JSONObject,
    ModelAnswer,
    function_tool,
    request_body,
    tool_call_body,
)

#: OpenAI ``finish_reason`` -> pydantic-ai's (the one place it is mapped).
FINISH_REASONS: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_call",
    "function_call": "tool_call",
    "content_filter": "content_filter",
}


def finish_reason(value: str | None) -> FinishReason | None:
    """pydantic-ai's finish reason for an OpenAI ``finish_reason`` (None when absent or unknown)."""
    return FINISH_REASONS.get(value) if value else None


class ModelAPISettings(Protocol):
    """The settings :meth:`KoraChatModel.of` reads, by their agent setting names (``MODEL_API_URL``, ...): the
    agent's settings object satisfies it and is passed whole."""

    @property
    def model_api_url(self) -> str:
        """The ModelAPI's base URL, e.g. ``http://host:port/v1``."""

    @property
    def model_api_key(self) -> str:
        """The API key sent to it."""

    @property
    def model_name(self) -> str:
        """The model name sent to it."""

    @property
    def model_timeout_seconds(self) -> float:
        """Seconds to connect and between reads of an answer."""

    @property
    def model_max_retries(self) -> int:
        """Retries of a request after the first attempt."""


class KoraChatModel(Model):
    """pydantic-ai model of one ModelAPI: ``base_url`` (``MODEL_API_URL``, e.g. ``http://host:port/v1``),
    ``api_key``, ``name`` (``MODEL_NAME``); ``timeout`` in seconds per read, ``max_retries`` after the first
    attempt. Use it from one event loop; ``await aclose()`` when done."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        name: str,
        *,
        timeout: float,
        max_retries: int,
        observer: ModelRequests | None = None,
    ) -> None:
        # The profile pydantic-ai's OpenAI provider gives the model (JSON-schema transformer included), with strict
        # tool schemas off: many OpenAI-compatible servers reject them.
        profile = merge_profile(
            openai_model_profile(name), OpenAIModelProfile(openai_supports_strict_tool_definition=False)
        )
        super().__init__(profile=profile)
        self.client = ModelClient(base_url, api_key, timeout=timeout, max_retries=max_retries)
        self._name = name
        self._base_url = base_url
        self._prepared: tuple[ModelRequestParameters, ModelRequestParameters] | None = None
        self.observer = observer or ModelRequests(name, base_url)

    @classmethod
    def of(cls, settings: ModelAPISettings, observer: ModelRequests | None = None) -> KoraChatModel:
        """The model ``settings`` name, its requests observed by ``observer``."""
        return cls(
            settings.model_api_url,
            settings.model_api_key,
            settings.model_name,
            timeout=settings.model_timeout_seconds,
            max_retries=settings.model_max_retries,
            observer=observer,
        )

    @property
    def model_name(self) -> str:
        """The ``model`` sent with every request (``MODEL_NAME``)."""
        return self._name

    @property
    def system(self) -> str:
        """The provider family, as pydantic-ai names it."""
        return PROVIDER

    @property
    def base_url(self) -> str:
        """``MODEL_API_URL``."""
        return self._base_url

    async def aclose(self) -> None:
        """Close the HTTP connection pool."""
        await self.client.aclose()

    def prepare_request(
        self, model_settings: ModelSettings | None, model_request_parameters: ModelRequestParameters
    ) -> tuple[ModelSettings | None, ModelRequestParameters]:
        """pydantic-ai's preparation (tool schemas adapted by the profile, settings merged), remembered for the
        last parameters object without settings: the runtime passes the same one for every first request
        while the tools do not change, and preparing it costs ~50 us."""
        if model_settings is None and self._prepared is not None and self._prepared[0] is model_request_parameters:
            return None, self._prepared[1]
        settings, prepared = super().prepare_request(model_settings, model_request_parameters)
        if model_settings is None and settings is None:
            self._prepared = (model_request_parameters, prepared)
        return settings, prepared

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        """One whole (non-streamed) model response for ``messages``. Raises ``ModelError``/``ModelTimeout``, and
        ``BudgetExhausted`` past the turn's deadline (:data:`~kora.agent.budget.TURN_DEADLINE`)."""
        settings, parameters = self.prepare_request(model_settings, model_request_parameters)
        body = self.request_body(messages, parameters, stream=False, settings=settings)
        with self.observer.observe(body) as record:
            async with in_time(TURN_DEADLINE.get()):
                answer = await self.client.complete(body)
            record.response = model_response(answer, self._name)
        return record.response

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncGenerator[StreamedResponse]:
        """A streamed model response for ``messages``; leaving the block closes the connection (the model API
        stops). Raises ``ModelError``/``ModelTimeout``, also while iterating, and ``BudgetExhausted`` when the turn's
        deadline (:data:`~kora.agent.budget.TURN_DEADLINE`) passes before the stream has ended."""
        settings, parameters = self.prepare_request(model_settings, model_request_parameters)
        body = self.request_body(messages, parameters, stream=True, settings=settings)
        deadline = TURN_DEADLINE.get()
        with self.observer.observe(body) as record:
            async with self._stream(body, deadline) as chunks:
                streamed = KoraStreamedResponse(
                    model_request_parameters=parameters,
                    _model_name=self._name,
                    _chunks=each_in_time(chunks, deadline),
                )
                yield streamed
                record.response = streamed.get()

    def _stream(
        self, body: JSONObject, deadline: float | None
    ) -> AbstractAsyncContextManager[AsyncIterator[ChatCompletionChunk]]:
        """The client's stream of ``body``, opened within ``deadline`` (None: the client's stream as it is)."""
        return self.client.stream(body) if deadline is None else self._stream_in_time(body, deadline)

    @asynccontextmanager
    async def _stream_in_time(
        self, body: JSONObject, deadline: float
    ) -> AsyncGenerator[AsyncIterator[ChatCompletionChunk]]:
        async with AsyncExitStack() as stack:
            async with in_time(deadline):  # only the opening: the block's own awaits are not this one's
                chunks = await stack.enter_async_context(self.client.stream(body))
            yield chunks

    def request_body(
        self,
        messages: Sequence[ModelMessage],
        parameters: ModelRequestParameters,
        *,
        stream: bool,
        settings: ModelSettings | None = None,
    ) -> JSONObject:
        """The ``POST /chat/completions`` body for ``messages`` with prepared ``parameters`` and ``settings``
        (:func:`settings_body`; ``tool_choice`` ``none`` sends no tools at all)."""
        instructions = self._get_instruction_parts(messages, parameters) or []
        system: list[JSONObject] = [
            {"role": "system", "content": part.content} for part in instructions if part.content
        ]
        choice = (settings or {}).get("tool_choice")
        tools = (
            []
            if choice == "none"
            else [
                function_tool(tool.name, tool.description or "", cast(JSONObject, tool.parameters_json_schema))
                for tool in [*parameters.function_tools, *parameters.output_tools]
            ]
        )
        required = bool(tools) and not parameters.allow_text_output
        body = request_body(self._name, [*system, *chat_messages(messages)], tools, stream=stream, required=required)
        if settings:
            body.update(settings_body(settings, has_tools=bool(tools)))
        return body


#: pydantic-ai ``ModelSettings`` keys sent under the same name.
_SAME_NAME = ("max_tokens", "temperature", "top_p", "seed", "presence_penalty", "frequency_penalty", "logit_bias")


def settings_body(settings: ModelSettings, *, has_tools: bool) -> JSONObject:
    """The request fields for pydantic-ai ``settings``: sampling and limits under OpenAI's names
    (``stop_sequences`` as ``stop``), ``tool_choice`` (``required``, or one named function) and
    ``parallel_tool_calls`` when tools are sent, and ``extra_body``'s fields as they are. Other keys (timeouts,
    retries) are the client's own and not sent."""
    body: JSONObject = {key: cast(JsonValue, settings[key]) for key in _SAME_NAME if key in settings}  # type: ignore[literal-required]
    if "stop_sequences" in settings:
        body["stop"] = cast(JsonValue, settings["stop_sequences"])
    choice = settings.get("tool_choice")
    if has_tools:
        if choice == "required":
            body["tool_choice"] = "required"
        elif isinstance(choice, list) and len(choice) == 1:
            body["tool_choice"] = {"type": "function", "function": {"name": choice[0]}}
        if "parallel_tool_calls" in settings:
            body["parallel_tool_calls"] = settings["parallel_tool_calls"]
    extra = settings.get("extra_body")
    if isinstance(extra, dict):
        body.update(cast(JSONObject, extra))
    return body


def model_response(answer: ModelAnswer, model_name: str) -> ModelResponse:
    """pydantic-ai's response for a parsed answer: a text part (when there is text), then the tool calls."""
    parts: list[ModelResponsePart] = [TextPart(answer.text)] if answer.text else []
    for call in answer.calls:
        parts.append(
            ToolCallPart(call.tool_name, call.arguments, call.tool_call_id)
            if call.tool_call_id
            else ToolCallPart(call.tool_name, call.arguments)
        )
    return ModelResponse(
        parts=parts,
        usage=RequestUsage(input_tokens=answer.input_tokens, output_tokens=answer.output_tokens),
        model_name=answer.model_name or model_name,
        # The local clock, as pydantic-ai stamps responses: events are ordered by it (the model's ``created`` has
        # whole seconds and another machine's clock).
        timestamp=datetime.now(UTC),
        provider_name=PROVIDER,
        provider_response_id=answer.response_id or None,
        provider_details=_provider_timestamp(answer.created),
        finish_reason=finish_reason(answer.finish_reason),
    )


def _provider_timestamp(created: float | None) -> dict[str, Any] | None:
    """The model server's own ``created`` time, kept where pydantic-ai keeps it (``provider_details``)."""
    return {"timestamp": datetime.fromtimestamp(created, UTC)} if created else None


@dataclass
class KoraStreamedResponse(StreamedResponse):
    """A streamed answer read chunk by chunk: text deltas and tool-call deltas become pydantic-ai's part events;
    the usage chunk, ``finish_reason`` and response id are recorded."""

    _model_name: str
    _chunks: AsyncIterator[ChatCompletionChunk]
    _timestamp: datetime = field(default_factory=lambda: datetime.now(UTC))

    async def _get_event_iterator(self) -> AsyncIterator[ModelResponseStreamEvent]:
        parts = self._parts_manager
        async for chunk in self._chunks:
            if chunk.id and self.provider_response_id is None:
                self.provider_response_id = chunk.id
                self.provider_details = _provider_timestamp(chunk.created)
            if chunk.usage is not None:
                usage = RequestUsage(
                    input_tokens=chunk.usage.prompt_tokens or 0, output_tokens=chunk.usage.completion_tokens or 0
                )
                self._add_usage(usage, reported=True, cumulative=True)
            for choice in chunk.choices or []:
                if choice.index != 0:
                    continue
                if choice.finish_reason:
                    self.finish_reason = finish_reason(choice.finish_reason)
                if choice.delta.content:
                    for event in parts.handle_text_delta(vendor_part_id="content", content=choice.delta.content):
                        yield event
                for call in choice.delta.tool_calls or []:
                    function = call.function
                    for event in parts.handle_tool_call_delta_events(
                        vendor_part_id=call.index,
                        tool_name=function.name if function is not None else None,
                        args=function.arguments if function is not None else None,
                        tool_call_id=call.id,
                    ):
                        yield event

    async def close_stream(self) -> None:
        """Nothing to close here: the model's ``request_stream`` block closes the connection."""

    @property
    def model_name(self) -> str:
        """The model that answered."""
        return self._model_name

    @property
    def provider_name(self) -> str:
        """``openai``: an OpenAI-compatible API."""
        return PROVIDER

    @property
    def provider_url(self) -> None:
        """Not recorded."""
        return None

    @property
    def timestamp(self) -> datetime:
        """When the response started (UTC)."""
        return self._timestamp


# -- pydantic-ai messages -> OpenAI chat messages ---------------------------------------------------------------


def chat_messages(messages: Sequence[ModelMessage]) -> list[JSONObject]:
    """OpenAI ``messages`` (without the instructions) for a pydantic-ai history, per the module docstring.

    Raises :class:`~kora.core.errors.RequestError` for content that cannot be sent as text.
    """
    result: list[JSONObject] = []
    previous: ModelResponse | None = None
    for message in _merge_responses(messages):
        if isinstance(message, ModelRequest):
            for part in _returns_in_call_order(message, previous):
                if isinstance(part, UserPromptPart):
                    result.append({"role": "user", "content": _prompt_content(part)})
                elif isinstance(part, ToolReturnPart):
                    text = part.model_response_str()
                    result.append({"role": "tool", "tool_call_id": part.tool_call_id, "content": text})
                elif isinstance(part, SystemPromptPart):
                    result.append({"role": "system", "content": part.content})
                else:
                    raise RequestError(f"A {type(part).__name__} cannot be sent to an OpenAI chat model.")
            previous = None
        else:
            if (assistant := _assistant_message(message)) is not None:
                result.append(assistant)
            previous = message
    return result


def _assistant_message(response: ModelResponse) -> JSONObject | None:
    """The assistant message of a response; None for a response with no text and no calls, which OpenAI-compatible
    APIs reject (pydantic-ai's own adapter leaves it out too)."""
    texts: list[str] = []
    calls: list[JsonValue] = []
    for part in response.parts:
        if isinstance(part, TextPart):
            texts.append(part.content)
        elif isinstance(part, ToolCallPart):
            calls.append(tool_call_body(part.tool_call_id, part.tool_name, part.args_as_json_str()))
        else:
            raise RequestError(f"A {type(part).__name__} cannot be sent to an OpenAI chat model.")
    if not calls and not texts:
        return None
    message: JSONObject = {"role": "assistant", "content": "\n\n".join(texts) if texts else None}
    if calls:
        message["tool_calls"] = calls
    return message


def _prompt_content(part: UserPromptPart) -> JsonValue:
    """A user message's ``content``: the text, or one content part per piece (texts stay separate parts, as
    pydantic-ai's OpenAI model sends them; images by URL with their ``detail``)."""
    if isinstance(part.content, str):
        return part.content
    parts: list[JsonValue] = []
    for item in part.content:
        if isinstance(item, str | TextContent):
            parts.append({"type": "text", "text": item if isinstance(item, str) else item.content})
        elif isinstance(item, ImageUrl):
            image: JSONObject = {"url": item.url}
            if detail := (item.vendor_metadata or {}).get("detail"):
                image["detail"] = detail
            parts.append({"type": "image_url", "image_url": image})
        else:
            raise RequestError(f"{type(item).__name__} content cannot be sent to this model API (text and images).")
    return parts


def _merge_responses(messages: Sequence[ModelMessage]) -> list[ModelMessage]:
    """Consecutive responses merged into one (parts in order), as pydantic-ai merges history before sending."""
    merged: list[ModelMessage] = []
    for message in messages:
        last = merged[-1] if merged else None
        if isinstance(message, ModelResponse) and isinstance(last, ModelResponse):
            merged[-1] = ModelResponse(parts=[*last.parts, *message.parts], timestamp=last.timestamp)
        else:
            merged.append(message)
    return merged


def _returns_in_call_order(request: ModelRequest, previous: ModelResponse | None) -> Sequence[Any]:
    """``request``'s parts with the returns that answer ``previous``'s calls put in the order of those calls
    (other parts keep their places), as pydantic-ai sends them."""
    calls = [p.tool_call_id for p in previous.parts if isinstance(p, ToolCallPart)] if previous is not None else []
    if len(calls) < 2:
        return request.parts
    order = {call_id: i for i, call_id in reversed(list(enumerate(calls)))}
    parts = list(request.parts)
    slots = [i for i, p in enumerate(parts) if isinstance(p, ToolReturnPart) and p.tool_call_id in order]
    answers = sorted((parts[i] for i in slots), key=lambda p: order[cast(ToolReturnPart, p).tool_call_id])
    for slot, answer in zip(slots, answers, strict=True):
        parts[slot] = answer
    return parts
