"""Floor for bench_agent.py's tool-calling turns: a bare pydantic-ai server, no sessions, no memory, no events.

``POST /v1/chat/completions`` runs ``Agent.run`` on the last user message with pydantic-ai's own
``OpenAIChatModel`` and one MCP toolset (pydantic-ai's ``MCPToolset``, connected once at start-up, as Kora
keeps its tool servers connected) and answers a minimal chat completion. Whatever a tool-calling turn costs
here is pydantic-ai's and the MCP SDK's own price for the same two model requests and one tool call; the
agent's CPU above it is Kora's.

Run: ``MODEL_API_URL=http://127.0.0.1:PORT/v1 MCP_URL=http://127.0.0.1:PORT/mcp FLOOR_PORT=N
python bench/pydantic_ai_floor.py``.
"""

import gc
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import uvicorn
from fastapi import FastAPI, Request
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.profiles.openai import OpenAIModelProfile
from pydantic_ai.providers.openai import OpenAIProvider

model = OpenAIChatModel(
    "scripted",
    provider=OpenAIProvider(base_url=os.environ["MODEL_API_URL"], api_key="unused"),
    profile=OpenAIModelProfile(openai_supports_strict_tool_definition=False),
)
toolset: MCPToolset = MCPToolset(os.environ["MCP_URL"], id="calc")
agent = Agent(model, instructions="You are a helpful assistant.", toolsets=[toolset])


@asynccontextmanager
async def lifespan(_: FastAPI) -> AsyncIterator[None]:
    async with toolset:
        await toolset.list_tools()
        gc.collect()
        gc.freeze()  # as the agent does after start-up, so both are measured alike
        yield


app = FastAPI(lifespan=lifespan)


@app.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}


@app.post("/v1/chat/completions")
async def chat(request: Request) -> dict[str, object]:
    body = await request.json()
    result = await agent.run(body["messages"][-1]["content"])
    return {
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": result.output}, "finish_reason": "stop"}],
    }


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(os.environ["FLOOR_PORT"]), log_level="warning", access_log=False)
