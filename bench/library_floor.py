"""The library floor of a text turn: the least work a chat-completions agent turn does on the libraries Kora is
built on, with nothing of Kora's own (no memory, sessions, identity, request limits, budgets, events, logging).

Per request: FastAPI + uvicorn (uvloop, httptools) take it; the body is validated by a small pydantic model; the
turn's messages are pydantic-ai message objects, prepared by pydantic-ai's ``Model.prepare_messages`` as every
request of an Agent is; the model is asked once with aiohttp (pooled keep-alive connections), its answer validated
as the ``openai`` package's ``ChatCompletion`` and turned into a pydantic-ai ``ModelResponse``; the OpenTelemetry
metrics SDK records what Kora records by default (``http.server.request.duration``,
``gen_ai.client.operation.duration`` and ``gen_ai.client.token.usage`` twice) for a Prometheus reader; the answer
is a FastAPI ``JSONResponse``. ``LIBRARY_FLOOR_METRICS=off`` leaves the four records out.

It measures how far below the agent the house's libraries let a turn go at all: ``bench_agent.py --library-floor``
runs it beside the agent and the floor (``floor_proxy.py``: FastAPI + uvicorn and a raw asyncio client, no
library on the request path).

Run: ``MODEL_API_URL=http://127.0.0.1:PORT/v1 PROXY_PORT=N python bench/library_floor.py``.
"""

from __future__ import annotations

import os
import time
import uuid
from datetime import UTC, datetime

import aiohttp
import pydantic
import pydantic_core
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from openai.types.chat import ChatCompletion
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from pydantic_ai.messages import ModelRequest, ModelResponse, SystemPromptPart, TextPart, UserPromptPart
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.test import TestModel
from pydantic_ai.usage import RequestUsage

URL = os.environ["MODEL_API_URL"].rstrip("/") + "/chat/completions"
METRICS = os.environ.get("LIBRARY_FLOOR_METRICS", "on") != "off"
SYSTEM = "You are a helpful assistant."


class ChatMessage(pydantic.BaseModel):
    """One message of the request (text content only)."""

    role: str
    content: str


class ChatRequest(pydantic.BaseModel):
    """The fields of a chat-completions request the turn reads."""

    model: str | None = None
    messages: list[ChatMessage]
    stream: bool = False


meter = MeterProvider(metric_readers=[PrometheusMetricReader()]).get_meter("library-floor")
request_duration = meter.create_histogram("http.server.request.duration", unit="s")
operation_duration = meter.create_histogram("gen_ai.client.operation.duration", unit="s")
token_usage = meter.create_histogram("gen_ai.client.token.usage", unit="{token}")
MODEL_ATTRIBUTES = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "m"}
INPUT_ATTRIBUTES = {**MODEL_ATTRIBUTES, "gen_ai.token.type": "input"}
OUTPUT_ATTRIBUTES = {**MODEL_ATTRIBUTES, "gen_ai.token.type": "output"}
HTTP_ATTRIBUTES = {
    "http.request.method": "POST",
    "http.response.status_code": 200,
    "url.scheme": "http",
    "http.route": "/v1/chat/completions",
}

model = TestModel()  # only its prepare_messages runs: the same code as every pydantic-ai model's
parameters = ModelRequestParameters()
app = FastAPI()
sessions: list[aiohttp.ClientSession] = []


@app.post("/v1/chat/completions")
async def chat_completions(request: Request) -> Response:
    """One text turn: the model asked once, its answer returned in OpenAI's shape."""
    started = time.perf_counter()
    chat = ChatRequest.model_validate_json(await request.body())
    messages = [ModelRequest(parts=[SystemPromptPart(SYSTEM), UserPromptPart(chat.messages[-1].content)])]
    sent = model.prepare_messages(messages, parameters)
    body = {
        "model": chat.model or "m",
        "messages": [
            {"role": "system" if isinstance(part, SystemPromptPart) else "user", "content": part.content}
            for message in sent
            if isinstance(message, ModelRequest)
            for part in message.parts
            if isinstance(part, SystemPromptPart | UserPromptPart)
        ],
    }
    if not sessions:
        sessions.append(aiohttp.ClientSession())
    asked = time.perf_counter()
    async with sessions[0].post(
        URL, data=pydantic_core.to_json(body), headers={"Content-Type": "application/json"}
    ) as answer:
        content = await answer.read()
    completion = ChatCompletion.model_validate_json(content)
    usage = completion.usage
    response = ModelResponse(
        parts=[TextPart(completion.choices[0].message.content or "")],
        usage=RequestUsage(
            input_tokens=usage.prompt_tokens if usage else 0, output_tokens=usage.completion_tokens if usage else 0
        ),
        model_name=completion.model,
        timestamp=datetime.now(UTC),
    )
    if METRICS:
        operation_duration.record(time.perf_counter() - asked, MODEL_ATTRIBUTES)
        token_usage.record(response.usage.input_tokens, INPUT_ATTRIBUTES)
        token_usage.record(response.usage.output_tokens, OUTPUT_ATTRIBUTES)
    text = response.text or ""
    out = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": response.usage.input_tokens,
            "completion_tokens": response.usage.output_tokens,
            "total_tokens": response.usage.input_tokens + response.usage.output_tokens,
        },
    }
    if METRICS:
        request_duration.record(time.perf_counter() - started, HTTP_ATTRIBUTES)
    return JSONResponse(out)


@app.get("/health")
async def health() -> dict[str, str]:
    """Liveness, for the bench's start-up wait."""
    return {"status": "ok"}


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(os.environ["PROXY_PORT"]), log_level="warning", access_log=False)
