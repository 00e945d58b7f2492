"""The ``POST /v1/chat/completions`` request body as the agent reads it: every field Kora honours, typed as OpenAI
documents it (docs/openai.md "Chat Completions request fields").

The models are strict (``"temperature": "0.5"`` is a type error, as it is for OpenAI) and name each field Kora
honours; :data:`REFUSED_WHEN_SET` and any other field are refused by :mod:`kora.agent.openai_api` when given a
value other than null or the default. Message fields Kora cannot honour (a message ``name``, ``audio``,
``function_call``) are refused the same way, by ``extra="forbid"``.

The ``openai`` package's own request types are ``TypedDict`` s whose lists are ``Iterable`` s (pydantic
validates those lazily, after the request was accepted) and whose message union has no discriminator (an error
names every role's shape); these models keep OpenAI's field names, values and limits with a precise error per
field. Pure data, no I/O.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, StringConstraints, model_validator

#: OpenAI's rule for a function or schema name.
NAME_PATTERN: Final = r"^[a-zA-Z0-9_-]{1,64}$"
#: Most tools one request may offer (OpenAI's limit).
MAX_TOOLS: Final = 128
#: Most ``stop`` sequences (OpenAI's limit).
MAX_STOP: Final = 4

Name = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]


def _empty(value: object) -> bool:
    """Null, or an object holding only nulls: a field that asks for nothing."""
    return value is None or (isinstance(value, dict) and all(_empty(item) for item in value.values()))


class _Strict(BaseModel):
    """Strict types, no unknown fields; an unknown field that asks for nothing (null, or an object of nulls)
    counts as not given: clients send back the message objects they parsed, with such fields (litellm adds
    ``provider_specific_fields: {"refusal": null}``)."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _unknown_empty_fields_are_absent(cls, data: object) -> object:
        if isinstance(data, dict) and (unknown := data.keys() - cls.__pydantic_fields__.keys()):
            dropped = {k for k in unknown if _empty(data[k])}
            if dropped:
                return {k: v for k, v in data.items() if k not in dropped}
        return data


# -- content parts ------------------------------------------------------------------------------------------------


class TextPart(_Strict):
    """``{"type": "text", "text": ...}``."""

    type: Literal["text"]
    text: str


class ImageURL(_Strict):
    """An image by URL (``https:`` or a ``data:`` URL); ``detail`` as OpenAI documents it."""

    url: str
    detail: Literal["auto", "low", "high"] | None = None


class ImagePart(_Strict):
    """``{"type": "image_url", "image_url": {"url", "detail"}}``: passed to the model."""

    type: Literal["image_url"]
    image_url: ImageURL


class UnsupportedPart(BaseModel):
    """``input_audio``, ``file`` or ``refusal`` content: recognised, so that the refusal names it
    (:func:`kora.agent.openai_api.parse_chat_request` refuses it with ``unsupported_value``)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    type: Literal["input_audio", "file", "refusal"]


ContentPart = Annotated[TextPart | ImagePart | UnsupportedPart, Field(discriminator="type")]


# -- messages -----------------------------------------------------------------------------------------------------


class FunctionCall(_Strict):
    """A called function: ``name`` and its ``arguments`` as JSON text."""

    name: str
    arguments: str


class AssistantToolCall(_Strict):
    """One entry of an assistant message's ``tool_calls``. ``kora_approval`` marks a call waiting for a person's
    approval, as Kora answered it (:data:`kora.core.protocol.APPROVAL_FIELD`); sent back with the conversation, it
    is accepted and the agent's own record of the call is what counts."""

    id: Annotated[str, StringConstraints(min_length=1)]
    type: Literal["function"]
    function: FunctionCall
    kora_approval: dict[str, JsonValue] | None = None


class SystemMessage(_Strict):
    """A ``system`` or ``developer`` message: instructions for the turn (text only)."""

    role: Literal["system", "developer"]
    content: str | list[TextPart]


class UserMessage(_Strict):
    """A ``user`` message: text, or parts (text and images)."""

    role: Literal["user"]
    content: str | list[ContentPart]


class AssistantMessage(_Strict):
    """An ``assistant`` message of the conversation so far: its text and the tool calls it made."""

    role: Literal["assistant"]
    content: str | list[ContentPart] | None = None
    tool_calls: list[AssistantToolCall] | None = None
    refusal: str | None = None


class ToolMessage(_Strict):
    """A ``tool`` message: the result of the call ``tool_call_id``."""

    role: Literal["tool"]
    content: str | list[TextPart]
    tool_call_id: Annotated[str, StringConstraints(min_length=1)]


Message = Annotated[SystemMessage | UserMessage | AssistantMessage | ToolMessage, Field(discriminator="role")]


def message_text(content: str | list[ContentPart] | list[TextPart] | None) -> str:
    """The text of a message's content: the string, or its text parts joined by newlines (as a model reads
    separate parts; an image part adds no text)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(part.text for part in content if isinstance(part, TextPart))


# -- tools and output ---------------------------------------------------------------------------------------------


class FunctionDefinition(_Strict):
    """A client tool: ``name`` (OpenAI's name rule), ``description``, ``parameters`` (a JSON schema object),
    ``strict``."""

    name: Name
    description: str | None = None
    parameters: dict[str, JsonValue] | None = None
    strict: bool | None = None


class FunctionTool(_Strict):
    """``{"type": "function", "function": {...}}``: a tool the client runs itself."""

    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(_Strict):
    """The function a named ``tool_choice`` forces."""

    name: Name


class NamedToolChoice(_Strict):
    """``{"type": "function", "function": {"name": ...}}``."""

    type: Literal["function"]
    function: NamedFunction


ToolChoice = Literal["auto", "none", "required"] | NamedToolChoice


class JSONSchemaFormat(_Strict):
    """The ``json_schema`` of a structured-output request."""

    name: Name
    description: str | None = None
    schema_: dict[str, JsonValue] | None = Field(default=None, alias="schema")
    strict: bool | None = None

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, populate_by_name=True)


class TextFormat(_Strict):
    """``{"type": "text"}``: plain text (the default)."""

    type: Literal["text"]


class JSONObjectFormat(_Strict):
    """``{"type": "json_object"}``: the answer is one JSON object."""

    type: Literal["json_object"]


class JSONSchemaResponseFormat(_Strict):
    """``{"type": "json_schema", "json_schema": {...}}``: the answer validates against the schema."""

    type: Literal["json_schema"]
    json_schema: JSONSchemaFormat


ResponseFormat = Annotated[TextFormat | JSONObjectFormat | JSONSchemaResponseFormat, Field(discriminator="type")]


class StreamOptions(_Strict):
    """``stream_options``: ``include_usage`` asks for the final usage chunk."""

    include_usage: bool | None = None


# -- the body -----------------------------------------------------------------------------------------------------

Temperature = Annotated[float, Field(ge=0, le=2)]
Penalty = Annotated[float, Field(ge=-2, le=2)]


class ChatRequest(BaseModel):
    """A ``POST /v1/chat/completions`` body: the fields Kora honours (each typed and bounded as OpenAI documents
    it) and Kora's ``session_id``. Other fields stay in ``model_extra`` for
    :func:`kora.agent.openai_api.parse_chat_request` to refuse."""

    model_config = ConfigDict(strict=True, extra="allow", frozen=True)

    model: str = ""
    messages: Annotated[list[Message], Field(min_length=1)]
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    session_id: str | None = None
    tools: Annotated[list[FunctionTool], Field(max_length=MAX_TOOLS)] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    temperature: Temperature | None = None
    top_p: Annotated[float, Field(ge=0, le=1)] | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    stop: str | Annotated[list[str], Field(max_length=MAX_STOP)] | None = None
    seed: int | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    logit_bias: dict[str, Annotated[int, Field(ge=-100, le=100)]] | None = None
    user: str | None = None
    metadata: dict[str, Annotated[str, StringConstraints(max_length=512)]] | None = None
    n: Annotated[int, Field(ge=1, le=128)] | None = None
    logprobs: bool | None = None
    store: bool | None = None


#: Fields OpenAI documents that Kora cannot honour: refused with ``unsupported_parameter`` when set (null is
#: accepted as "not set"). Values of honoured fields that Kora cannot honour (``n`` > 1, ``logprobs: true``,
#: ``store: true``) are refused with ``unsupported_value``.
REFUSED_WHEN_SET: Final = frozenset(
    {
        "audio",
        "function_call",
        "functions",
        "modalities",
        "prediction",
        "prompt_cache_key",
        "reasoning_effort",
        "safety_identifier",
        "service_tier",
        "top_logprobs",
        "verbosity",
        "web_search_options",
    }
)
