"""The scripted model: an OpenAI-compatible chat-completions and embeddings server that answers from a script.

It is the only stand-in for an LLM that Kora's tests and offline demo use. Real clients (the ``openai``
package, pydantic-ai's ``OpenAIChatModel``) talk to it unchanged. Every request body is recorded in
order (:attr:`ScriptedModel.requests`) so tests can assert on the history an agent replayed, and
requests whose client went away before the reply finished are listed in
:attr:`ScriptedModel.aborted_requests`.

How a reply is chosen for each request, first hit wins:

1. the queue of replies pushed with :meth:`ScriptedModel.enqueue` (FIFO);
2. the first :class:`Rule` whose :class:`Match` fits the request and whose ``times`` is not used up;
3. the default (:mod:`kora.scripted.defaults`), first hit wins:

   - ``response_format`` json_schema ``extracted_facts``: ``{"facts": [...]}``, the sentences of the
     last user message's ``user: ...`` lines that are not questions and have a first-person word
     (``I``, ``I'm``, ``me``, ``my``, ``mine``, ``myself``), verbatim (``user: Hi! I live in Paris.``
     -> ``{"facts": ["I live in Paris."]}``);
   - json_schema ``fact_conflicts``: ``{"contradicted": []}``;
   - any other json_schema: a 400 error, code ``no_scripted_rule``, naming the schema (script a rule);
   - ``{"type": "json_object"}``: ``{}``;
   - a system message starting ``Summarize``: ``Summary:`` and one ``- <line>`` per distinct line of the
     other messages (each cut at 30 words, 200 words in all, earliest first);
   - ``Tool result: <content>`` if the last message is a tool result, else ``You said: <last user text>``.

Placeholders ``{name}`` in reply text and in tool-call argument strings are filled from the named
groups of the rule's ``user_matches`` regex, ``{user}`` (last user text) and ``{tool_result}``
(content of the last tool message). Unknown placeholders are left as written. A substituted argument
whose JSON schema in the request's ``tools`` says ``integer``, ``number`` or ``boolean`` is converted
to that type (``"2"`` -> ``2``).

Script files (YAML or JSON; :func:`load_script_file`) hold a list of rules, either at the top level or
under ``rules:``. A reply is a mapping with ``kind`` = ``text`` | ``tool_calls`` | ``error`` (inferred
from ``calls`` / ``status`` when omitted) or a plain string for a text reply. Example::

    rules:
      # After the tool ran, report its result. Listed first: the user text still matches below.
      - when: {after_tool: true, user_matches: 'add (?P<a>\\d+) and (?P<b>\\d+)'}
        reply: "The sum of {a} and {b} is {tool_result}"
      - when: {user_matches: 'add (?P<a>\\d+) and (?P<b>\\d+)', tool_available: add}
        reply:
          kind: tool_calls
          calls: [{name: add, arguments: {a: "{a}", b: "{b}"}}]
      - when: {user_matches: '(?i)slow'}
        reply: {kind: text, text: "...finally", delay_seconds: 2, chunk_delay_seconds: 0.1}
      - when: {user_matches: 'overloaded'}
        reply: {kind: error, status: 503, message: "try later", type: server_error}
        times: 1
      # Structured output: match the json_schema's name; ``json`` is a text reply holding that value as
      # JSON. The first extraction gets an invalid answer (the caller's retry is tested), then a good one.
      - when: {response_format: extracted_facts, user_matches: Paris}
        reply: "not json"
        times: 1
      - when: {response_format: extracted_facts, user_matches: Paris}
        reply: {json: {facts: ["The user lives in Paris."]}}
      - when: {system_matches: '^Summarize'}
        reply: "The user talked about Paris."

Rule conditions (``when``, all given must hold): ``user_matches`` (regex searched in the last user
message), ``system_matches`` (regex searched in the system and developer messages), ``after_tool``
(the last message is / is not a tool result), ``tool_available`` (a tool of that name is offered),
``response_format`` (the json_schema ``name`` of the request's response format, or ``json_object``).

Reply fields (all kinds): ``delay_seconds`` (seconds before the response starts). Text and tool-call
replies also take ``chunk_delay_seconds`` (seconds between streamed chunks) and
``disconnect_after_chunks`` (streaming only: the server drops the connection after that many content
or tool-call chunks, simulating a crashed backend) and ``end_after_chunks`` (streaming only: the response
ends cleanly after that many chunks, with no finish chunk and no ``[DONE]``: an answer cut short).
``text`` takes ``chunks`` (explicit stream pieces).

A request's ``max_completion_tokens`` (else ``max_tokens``) cuts a text reply to that many words, with
``finish_reason: "length"``, as a model stops at its token limit.

Usage is deterministic: ``prompt_tokens`` counts whitespace-separated words over all message contents
and tool-call argument strings, ``completion_tokens`` the words of the reply text plus those of the
JSON of each tool call's arguments (at least 1 for a tool-call reply).

Embeddings (``POST /v1/embeddings``) are not scripted: every text gets a deterministic unit vector by
feature hashing of its words and their character trigrams (:mod:`kora.scripted.embedding`), so texts
sharing words have a high cosine similarity and unrelated texts one near 0. 384 dimensions unless the
model's ``embedding_dimensions`` or the request's ``dimensions`` say otherwise; ``encoding_format``
``float`` or ``base64``; ``model`` optional (the model's name when absent). Requests are read by
:mod:`kora.core.openai_wire.embeddings`, as the hosted model reads them: bad input (no or empty input, more than
2048 items, an item over 32768 characters, non-strings, token ids, ``dimensions`` over 8192) gets a 400 OpenAI
error.

HTTP surface of :func:`create_app`: ``POST /v1/chat/completions`` (and ``/chat/completions``),
``POST /v1/embeddings`` (and ``/embeddings``), ``GET /v1/models``, ``GET /health``, and control
endpoints for other processes: ``POST /_script/replies`` (a reply object or a list; enqueued),
``PUT /_script/rules`` (a script: list of rules or ``{"rules": [...]}``; replaces the rules),
``GET /_script/requests`` (``{"requests": [...], "aborted_requests": [...], "embedding_requests":
[...]}``) and ``DELETE /_script`` (reset; add ``?keep_rules=true`` to keep the rules).

Note: OpenAI clients retry 429 and 5xx replies and timeouts by default (``max_retries=2``); a retried
request consumes the next reply. Use ``max_retries=0`` in tests that script errors or delays.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import re
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final, TypeAlias, TypeVar

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from kora.core.env import DEFAULT_MAX_LARGE_REQUEST_BYTES
from kora.core.errors import RequestError, SimulatedDisconnect
from kora.core.limits import RequestLimits
from kora.core.openai_wire import (
    DONE_EVENT,
    ChunkWriter,
    assistant_message,
    completion_body,
    error_body,
    model_list_body,
    openai_error_body,
    tool_call_body,
    usage_body,
)
from kora.core.openai_wire.embeddings import MAX_INPUT_CHARS, embedding_request, embedding_response_body
from kora.core.serving import Readiness, Status, probe_routes
from kora.scripted.defaults import default_reply
from kora.scripted.embedding import DEFAULT_DIMENSIONS, MAX_DIMENSIONS, embed
from kora.scripted.script import (
    Conversation,
    ErrorReply,
    JSONObject,
    Match,
    Reply,
    Rule,
    ScriptError,
    TextReply,
    ToolCall,
    ToolCallReply,
    content_text,
    instantiate,
    load_script,
    load_script_file,
    reply_from_json,
    reply_to_json,
)

__all__ = [
    "DEFAULT_MODEL_NAME",
    "ErrorReply",
    "Match",
    "Reply",
    "Rule",
    "ScriptError",
    "ScriptedModel",
    "ScriptedModelApp",
    "TextReply",
    "ToolCall",
    "ToolCallReply",
    "Usage",
    "count_usage",
    "create_app",
    "load_script",
    "load_script_file",
    "reply_from_json",
    "reply_to_json",
    "split_chunks",
]

DEFAULT_MODEL_NAME: Final = "scripted"

_T = TypeVar("_T")

# --------------------------------------------------------------------------------------------------
# Usage and chunking
# --------------------------------------------------------------------------------------------------

_CHUNK = re.compile(r"\s*\S+|\s+$")


def split_chunks(text: str) -> list[str]:
    """``text`` split into word-ish stream tokens (each word with its leading whitespace).

    ``"".join(split_chunks(t)) == t`` for every string; ``""`` gives ``[]``.
    """
    return _CHUNK.findall(text)


def _words(text: str) -> int:
    return len(text.split())


def arguments_json(call: ToolCall) -> str:
    """The arguments string sent on the wire for ``call`` (``json.dumps`` with default separators)."""
    return json.dumps(call.arguments)


@dataclass(frozen=True)
class Usage:
    """Token counts of one completion (whitespace-separated words, see the module docstring)."""

    prompt_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        """``prompt_tokens + completion_tokens``."""
        return self.prompt_tokens + self.completion_tokens

    def to_json(self) -> JSONObject:
        """The OpenAI ``usage`` object."""
        return usage_body(self.prompt_tokens, self.completion_tokens)


def token_limited(body: Mapping[str, Any], reply: Reply) -> tuple[Reply, bool]:
    """``reply`` cut to the request's ``max_completion_tokens`` (else ``max_tokens``) words, as a model stops at
    its token limit, and whether it was cut (the answer's ``finish_reason`` is then ``length``). Only text
    replies are cut."""
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    if not isinstance(reply, TextReply) or isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        return reply, False
    chunks = split_chunks(reply.text)
    if len([c for c in chunks if c.strip()]) <= limit:
        return reply, False
    kept = [c for c in chunks if c.strip()][:limit]
    return replace(reply, text="".join(kept), chunks=None), True


def count_usage(body: Mapping[str, Any], reply: TextReply | ToolCallReply) -> Usage:
    """Deterministic usage of answering request ``body`` with ``reply``.

    Prompt: words of every message's content plus of every tool-call ``arguments`` string in the
    messages. Completion: words of the reply text, plus words of each call's arguments JSON; a
    tool-call reply counts at least 1.
    """
    prompt = 0
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict):
            continue
        prompt += _words(content_text(message.get("content")))
        calls = message.get("tool_calls")
        for call in calls if isinstance(calls, list) else []:
            function = call.get("function") if isinstance(call, dict) else None
            arguments = function.get("arguments") if isinstance(function, dict) else None
            if isinstance(arguments, str):
                prompt += _words(arguments)
    if isinstance(reply, TextReply):
        return Usage(prompt, _words(reply.text))
    completion = _words(reply.text or "") + sum(_words(arguments_json(call)) for call in reply.calls)
    return Usage(prompt, max(1, completion))


# --------------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------------


class ScriptedModel:
    """The script and the record of one scripted model; thread-safe (tests and server share it).

    ``rules`` is the script, ``model_name`` the name listed by ``/v1/models`` and used when a request
    names none, ``max_recorded`` caps :attr:`requests` and :attr:`embedding_requests` (oldest dropped
    first; ``None``: unbounded), ``embedding_dimensions`` is the length of embedding vectors when a
    request gives no ``dimensions``, ``embedding_max_chars`` the longest text it embeds (a longer one is refused
    with a 400, as an embedding server that does not truncate refuses one over its context length).
    :attr:`requests` holds every chat request body in arrival order, :attr:`aborted_requests` the bodies
    whose client disconnected before the reply finished, :attr:`embedding_requests` every embeddings
    request body, valid or not. Raises ``ValueError`` if ``embedding_dimensions`` is not positive.
    """

    def __init__(
        self,
        rules: Iterable[Rule] = (),
        *,
        model_name: str = DEFAULT_MODEL_NAME,
        max_recorded: int | None = None,
        embedding_dimensions: int = DEFAULT_DIMENSIONS,
        embedding_max_chars: int = MAX_INPUT_CHARS,
    ) -> None:
        if embedding_dimensions <= 0:
            raise ValueError(f"embedding_dimensions must be positive, got {embedding_dimensions}")
        self.model_name = model_name
        self.embedding_max_chars = embedding_max_chars
        self.max_recorded = max_recorded
        self.embedding_dimensions = embedding_dimensions
        self.requests: list[JSONObject] = []
        self.aborted_requests: list[JSONObject] = []
        self.embedding_requests: list[object] = []
        self._rules: list[Rule] = list(rules)
        self._uses: list[int] = [0] * len(self._rules)
        self._queue: list[Reply] = []
        self._models_seen: dict[str, None] = {model_name: None}
        self._ids = itertools.count(1)
        self._changed = threading.Condition()

    # -- script ------------------------------------------------------------------------------------

    @property
    def rules(self) -> list[Rule]:
        """A copy of the current rules, in match order."""
        with self._changed:
            return list(self._rules)

    @property
    def queued(self) -> int:
        """How many queued replies are not used yet."""
        with self._changed:
            return len(self._queue)

    def enqueue(self, *replies: Reply | str) -> None:
        """Queue replies for the next requests, in order (a string is a :class:`TextReply`)."""
        with self._changed:
            self._queue.extend(TextReply(r) if isinstance(r, str) else r for r in replies)

    def load_script(self, rules: Iterable[Rule]) -> None:
        """Replace the rules (and their ``times`` counters)."""
        with self._changed:
            self._rules = list(rules)
            self._uses = [0] * len(self._rules)

    def add_rule(self, when: Match, reply: Reply | str, times: int | None = None) -> None:
        """Append one rule after the existing ones."""
        with self._changed:
            self._rules.append(Rule(when, TextReply(reply) if isinstance(reply, str) else reply, times))
            self._uses.append(0)

    def load_script_file(self, path: str | Path) -> None:
        """Replace the rules with those of a YAML/JSON script file (errors as :func:`load_script_file`)."""
        self.load_script(load_script_file(path))

    def reset(self, *, keep_rules: bool = False) -> None:
        """Forget queued replies, recorded (chat and embeddings) and aborted requests and rule counters;
        drop the rules too unless ``keep_rules``."""
        with self._changed:
            self._queue.clear()
            self.requests.clear()
            self.aborted_requests.clear()
            self.embedding_requests.clear()
            if not keep_rules:
                self._rules = []
            self._uses = [0] * len(self._rules)

    # -- serving -----------------------------------------------------------------------------------

    @property
    def model_names(self) -> list[str]:
        """The configured model name followed by every other name requests used."""
        with self._changed:
            return list(self._models_seen)

    def next_id(self) -> int:
        """A number unique within this model, for completion and tool-call ids."""
        return next(self._ids)

    def _note_model(self, body: JSONObject) -> None:
        # Caller holds the lock. Names requests use are listed by /v1/models from then on.
        model = body.get("model")
        if isinstance(model, str) and model not in self._models_seen:
            self._models_seen[model] = None

    def _record(self, records: list[_T], body: _T) -> None:
        # Caller holds the lock.
        records.append(body)
        if self.max_recorded is not None and len(records) > self.max_recorded:
            del records[0]

    def next_reply(self, body: JSONObject) -> Reply:
        """Record ``body`` and choose its reply (queue, rules, default) with placeholders filled.

        ``body`` is a decoded chat-completions request. The returned reply is concrete: no
        placeholders left that the script could fill, tool arguments converted to their schemas.
        """
        conversation = Conversation(body)
        values = {"user": conversation.user_text, "tool_result": conversation.tool_result}
        with self._changed:
            self._record(self.requests, body)
            self._note_model(body)
            chosen: Reply | None = self._queue.pop(0) if self._queue else None
            if chosen is None:
                for index, rule in enumerate(self._rules):
                    if rule.times is not None and self._uses[index] >= rule.times:
                        continue
                    groups = rule.when.match(conversation)
                    if groups is not None:
                        self._uses[index] += 1
                        chosen = rule.reply
                        values = {**values, **groups}
                        break
            self._changed.notify_all()
        if chosen is None:
            return default_reply(conversation)
        return instantiate(chosen, values, conversation)

    def embeddings(self, body: object) -> JSONObject:
        """Record ``body`` (a decoded ``POST /v1/embeddings`` request) and build OpenAI's response: one
        unit vector per input (see :mod:`kora.scripted.embedding`), usage counting whitespace-separated words.

        Raises :class:`~kora.core.errors.RequestError` if OpenAI would refuse the request (see
        :func:`kora.core.openai_wire.embeddings.embedding_request`) or ``dimensions`` exceeds
        :data:`~kora.scripted.embedding.MAX_DIMENSIONS`.
        """
        with self._changed:
            self._record(self.embedding_requests, body)
            if isinstance(body, dict):
                self._note_model(body)
            self._changed.notify_all()
        request = embedding_request(body, default_model=self.model_name)
        if request.dimensions is not None and request.dimensions > MAX_DIMENSIONS:
            raise RequestError(f"Invalid request: dimensions: at most {MAX_DIMENSIONS}, got {request.dimensions}")
        if longest := max((len(text) for text in request.texts if len(text) > self.embedding_max_chars), default=0):
            raise RequestError(
                f"Invalid request: input: at most {self.embedding_max_chars} characters per string, got {longest}"
            )
        dimensions = request.dimensions or self.embedding_dimensions
        vectors = [embed(text, dimensions) for text in request.texts]
        tokens = sum(_words(text) for text in request.texts)
        return embedding_response_body(vectors, request.model, tokens, request.encoding_format)

    def record_abort(self, body: JSONObject) -> None:
        """Note that the client of ``body`` disconnected before its reply finished."""
        with self._changed:
            self.aborted_requests.append(body)
            self._changed.notify_all()

    def wait_for_requests(self, count: int, timeout: float = 5.0) -> bool:
        """Block until at least ``count`` requests were recorded; ``False`` on timeout (seconds)."""
        with self._changed:
            return self._changed.wait_for(lambda: len(self.requests) >= count, timeout)

    def wait_for_aborts(self, count: int = 1, timeout: float = 5.0) -> bool:
        """Block until at least ``count`` aborted requests were seen; ``False`` on timeout (seconds)."""
        with self._changed:
            return self._changed.wait_for(lambda: len(self.aborted_requests) >= count, timeout)


# --------------------------------------------------------------------------------------------------
# The ASGI app
# --------------------------------------------------------------------------------------------------

Scope: TypeAlias = MutableMapping[str, Any]
Message: TypeAlias = MutableMapping[str, Any]
Receive: TypeAlias = Callable[[], Awaitable[Message]]
Send: TypeAlias = Callable[[Message], Awaitable[None]]

CHAT_PATHS: Final = frozenset({"/v1/chat/completions", "/chat/completions"})
EMBEDDING_PATHS: Final = frozenset({"/v1/embeddings", "/embeddings"})
_JSON_HEADERS: Final = [(b"content-type", b"application/json")]
_SSE_HEADERS: Final = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
# ASCII escapes: a lone surrogate in a request ("\ud800", valid JSON) echoed back must not fail the encoding.
_dumps = json.JSONEncoder(separators=(",", ":")).encode


class _QuietSimulatedDisconnects(logging.Filter):
    """Hides uvicorn's error log for connections dropped on purpose; real errors still show."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], SimulatedDisconnect))


def _install_log_filter() -> None:
    logger = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _QuietSimulatedDisconnects) for f in logger.filters):
        logger.addFilter(_QuietSimulatedDisconnects())


def _error_json(message: str, type_: str, code: str | None) -> bytes:
    """The OpenAI error body ``{"error": {"message", "type", "param", "code"}}`` as JSON bytes."""
    return _dumps(openai_error_body(message, type_, code)).encode()


class _DisconnectWatch:
    """Waits on ``receive`` in the background: it returns only when the client disconnects (uvicorn
    answers ``http.disconnect`` once the body was read), so a finished task means the client left."""

    def __init__(self, receive: Receive) -> None:
        self._task = asyncio.ensure_future(receive())

    @property
    def gone(self) -> bool:
        return self._task.done()

    async def sleep(self, seconds: float) -> bool:
        """Sleep ``seconds`` unless the client leaves first; ``True`` if it left."""
        if seconds > 0 and not self._task.done():
            await asyncio.wait((self._task,), timeout=seconds)
        return self._task.done()

    def close(self) -> None:
        self._task.cancel()


class _ChatCompletions:
    """Raw ASGI handler of ``POST /v1/chat/completions``: the hot path, kept free of framework layers."""

    def __init__(self, model: ScriptedModel) -> None:
        self.model = model

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await _read_json(receive, send)
        if body is _DONE:
            return
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            await _send_error(send, 400, "'messages' is required and must be a list", "invalid_request_error", None)
            return
        problem = response_format_problem(body.get("response_format"))
        if problem is not None:
            await _send_error(send, 400, problem, "invalid_request_error", None)
            return
        reply, cut = token_limited(body, self.model.next_reply(body))
        stream = body.get("stream") is True
        watch = _DisconnectWatch(receive) if stream or reply.delay_seconds > 0 else None
        try:
            if watch is not None and await watch.sleep(reply.delay_seconds):
                self.model.record_abort(body)
                return
            if isinstance(reply, ErrorReply):
                await _send_error(send, reply.status, reply.message, reply.type, reply.code)
            elif stream:
                assert watch is not None
                if not await self._stream(body, reply, send, watch, cut=cut):
                    self.model.record_abort(body)
            else:
                await _send_json(send, 200, self._completion(body, reply, cut=cut))
        finally:
            if watch is not None:
                watch.close()

    def _header(self, body: JSONObject) -> tuple[str, int, str]:
        model = body.get("model")
        return (
            f"chatcmpl-scripted-{self.model.next_id()}",
            int(time.time()),
            (model if isinstance(model, str) and model else self.model.model_name),
        )

    def _tool_call_ids(self, reply: ToolCallReply) -> list[str]:
        return [f"call_scripted_{self.model.next_id()}" for _ in reply.calls]

    def _completion(self, body: JSONObject, reply: TextReply | ToolCallReply, *, cut: bool = False) -> JSONObject:
        completion_id, created, model = self._header(body)
        calls: list[JSONObject] = []
        if isinstance(reply, ToolCallReply):
            calls = [
                tool_call_body(call_id, call.name, arguments_json(call))
                for call_id, call in zip(self._tool_call_ids(reply), reply.calls, strict=True)
            ]
        finish_reason = "tool_calls" if calls else "length" if cut else "stop"
        usage = count_usage(body, reply).to_json()
        return completion_body(
            completion_id, model, assistant_message(reply.text, calls), finish_reason, usage, created
        )

    async def _stream(
        self,
        body: JSONObject,
        reply: TextReply | ToolCallReply,
        send: Send,
        watch: _DisconnectWatch,
        *,
        cut: bool = False,
    ) -> bool:
        """Send ``reply`` as SSE chunks; ``False`` if the client disconnected before the end."""
        completion_id, created, model = self._header(body)
        options = body.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        writer = ChunkWriter(completion_id, model, created, include_usage=include_usage)

        # Every content or tool-call delta, in order; the role chunk and the finish chunk frame them.
        deltas: list[JSONObject] = []
        text = reply.text or ""
        chunks = reply.chunks if isinstance(reply, TextReply) and reply.chunks is not None else split_chunks(text)
        deltas += ({"content": chunk} for chunk in chunks)
        finish_reason = "length" if cut else "stop"
        if isinstance(reply, ToolCallReply):
            finish_reason = "tool_calls"
            for index, (call_id, call) in enumerate(zip(self._tool_call_ids(reply), reply.calls, strict=True)):
                deltas.append({"tool_calls": [{"index": index, **tool_call_body(call_id, call.name, "")}]})
                deltas += (
                    {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}
                    for piece in split_chunks(arguments_json(call))
                )

        await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
        first: JSONObject = {"role": "assistant", "content": "" if isinstance(reply, TextReply) else None}
        await send({"type": "http.response.body", "body": writer.chunk(first), "more_body": True})
        for sent, delta in enumerate(deltas):
            if reply.disconnect_after_chunks is not None and sent >= reply.disconnect_after_chunks:
                raise SimulatedDisconnect
            if reply.end_after_chunks is not None and sent >= reply.end_after_chunks:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                return True
            if sent and await watch.sleep(reply.chunk_delay_seconds):
                return False
            await send({"type": "http.response.body", "body": writer.chunk(delta), "more_body": True})
        if reply.disconnect_after_chunks is not None and reply.disconnect_after_chunks <= len(deltas):
            raise SimulatedDisconnect
        tail = writer.chunk({}, finish_reason)
        if include_usage:
            tail += writer.usage(count_usage(body, reply).to_json())
        tail += DONE_EVENT
        if watch.gone:
            return False
        await send({"type": "http.response.body", "body": tail, "more_body": False})
        return True


class _Embeddings:
    """Raw ASGI handler of ``POST /v1/embeddings``."""

    def __init__(self, model: ScriptedModel) -> None:
        self.model = model

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await _read_json(receive, send)
        if body is _DONE:
            return
        try:
            payload = self.model.embeddings(body)
        except RequestError as error:
            await _send_json(send, error.status, error_body(error))
            return
        await _send_json(send, 200, payload)


_RESPONSE_FORMAT_TYPES: Final = ("text", "json_object", "json_schema")


def response_format_problem(value: object) -> str | None:
    """Why a chat request's ``response_format`` is malformed, or ``None`` if it is absent or well formed:
    an object whose ``type`` is ``text``, ``json_object`` or ``json_schema``, the last with a
    ``json_schema`` object holding a non-empty string ``name``."""
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("type") not in _RESPONSE_FORMAT_TYPES:
        return "'response_format' must be an object whose 'type' is 'text', 'json_object' or 'json_schema'"
    if value["type"] == "json_schema":
        spec = value.get("json_schema")
        name = spec.get("name") if isinstance(spec, dict) else None
        if not (isinstance(name, str) and name):
            return "'response_format.json_schema' must be an object with a non-empty string 'name'"
    return None


class _Done:
    """Nothing left to answer: the client left while its body was read, or it was told the body is not JSON."""


_DONE: Final = _Done()


async def _read_json(receive: Receive, send: Send) -> object:
    """The decoded JSON request body; :data:`_DONE` if the client left first or the body was not JSON
    (then a 400 ``invalid_json`` error was sent)."""
    raw = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return _DONE
        raw += message.get("body", b"")
        if not message.get("more_body", False):
            break
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:  # RecursionError: arrays nested thousands deep
        await _send_error(send, 400, f"request body is not valid JSON: {exc}", "invalid_request_error", "invalid_json")
        return _DONE


async def _send_json(send: Send, status: int, payload: JSONObject) -> None:
    await send({"type": "http.response.start", "status": status, "headers": _JSON_HEADERS})
    await send({"type": "http.response.body", "body": _dumps(payload).encode()})


async def _send_error(send: Send, status: int, message: str, type_: str, code: str | None) -> None:
    await send({"type": "http.response.start", "status": status, "headers": _JSON_HEADERS})
    await send({"type": "http.response.body", "body": _error_json(message, type_, code)})


def _json_response(payload: object) -> Response:
    # Not Starlette's JSONResponse: it writes non-ASCII as is, and recorded requests may hold lone surrogates.
    return Response(_dumps(payload).encode(), media_type="application/json")


def _json_error(status: int, message: str) -> Response:
    return Response(_error_json(message, "invalid_request_error", None), status, media_type="application/json")


def _control_routes(model: ScriptedModel) -> list[Route]:
    async def models(request: Request) -> Response:
        return _json_response(model_list_body(model.model_names, "kora-scripted"))

    async def read_json(request: Request) -> object:
        try:
            return json.loads(await request.body())
        except (ValueError, RecursionError) as exc:
            raise ScriptError(f"request body is not valid JSON: {exc}") from exc

    async def post_replies(request: Request) -> Response:
        try:
            data = await read_json(request)
            items = data.get("replies") if isinstance(data, dict) and "replies" in data else data
            replies = [reply_from_json(item) for item in (items if isinstance(items, list) else [items])]
        except ScriptError as exc:
            return _json_error(400, str(exc))
        model.enqueue(*replies)
        return _json_response({"queued": model.queued})

    async def put_rules(request: Request) -> Response:
        try:
            rules = load_script(await read_json(request))
        except ScriptError as exc:
            return _json_error(400, str(exc))
        model.load_script(rules)
        return _json_response({"rules": len(rules)})

    async def get_requests(request: Request) -> Response:
        return _json_response(
            {
                "requests": list(model.requests),
                "aborted_requests": list(model.aborted_requests),
                "embedding_requests": list(model.embedding_requests),
            }
        )

    async def reset(request: Request) -> Response:
        model.reset(keep_rules=request.query_params.get("keep_rules", "").lower() in {"1", "true", "yes"})
        return Response(status_code=204)

    return [
        *probe_routes(lambda: Readiness(Status.READY), {"scripted": True}),
        Route("/v1/models", models, methods=["GET"]),
        Route("/models", models, methods=["GET"]),
        Route("/_script/replies", post_replies, methods=["POST"]),
        Route("/_script/rules", put_rules, methods=["PUT"]),
        Route("/_script/requests", get_requests, methods=["GET"]),
        Route("/_script", reset, methods=["DELETE"]),
    ]


class ScriptedModelApp:
    """The ASGI application of a :class:`ScriptedModel` (built by :func:`create_app`).

    ``POST`` to a chat or embeddings path goes straight to its raw handler (the hot paths);
    everything else, including lifespan, is served by a small Starlette app.
    """

    def __init__(self, model: ScriptedModel, max_request_bytes: int = DEFAULT_MAX_LARGE_REQUEST_BYTES) -> None:
        self.model = model
        self._chat = _ChatCompletions(model)
        self._embeddings = _Embeddings(model)
        self._other = Starlette(routes=_control_routes(model))
        self._limited = RequestLimits(self._route, max_body_bytes=max_request_bytes)
        _install_log_filter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one request (after the request limits) or the lifespan."""
        await self._limited(scope, receive, send)

    async def _route(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"].rstrip("/") if scope["type"] == "http" and scope["method"] == "POST" else None
        if path in CHAT_PATHS:
            await self._chat(scope, receive, send)
        elif path in EMBEDDING_PATHS:
            await self._embeddings(scope, receive, send)
        else:
            await self._other(scope, receive, send)


def create_app(
    model: ScriptedModel | None = None, max_request_bytes: int = DEFAULT_MAX_LARGE_REQUEST_BYTES
) -> ScriptedModelApp:
    """The ASGI app serving ``model`` (a fresh :class:`ScriptedModel` if ``None``); see the module docstring. A
    body over ``max_request_bytes`` is a 413, JSON beyond the limits of :mod:`kora.core.limits` a 400."""
    return ScriptedModelApp(model if model is not None else ScriptedModel(), max_request_bytes)
