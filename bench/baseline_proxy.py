"""Baseline for bench_agent.py: a bare FastAPI proxy that forwards a chat request to the model and returns its JSON.

It uses the agent's own HTTP stack for the model call (``httpx2`` over aiohttp, as ``kora.agent.model_client``),
so the difference between the two is what the agent does besides proxying: sessions, memory, history, events.

Run: ``MODEL_API_URL=http://127.0.0.1:PORT/v1 PROXY_PORT=N python bench/baseline_proxy.py``.
"""

import os

import httpx2
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response
from httpx_aiohttp.httpx2 import AiohttpTransport

MODEL_API_URL = os.environ["MODEL_API_URL"].rstrip("/")
client = httpx2.AsyncClient(transport=AiohttpTransport(), timeout=60)
app = FastAPI()


@app.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}


@app.post("/v1/chat/completions")
async def chat(request: Request) -> Response:
    body = await request.body()
    reply = await client.post(
        f"{MODEL_API_URL}/chat/completions", content=body, headers={"content-type": "application/json"}
    )
    return Response(reply.content, status_code=reply.status_code, media_type="application/json")


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(os.environ["PROXY_PORT"]), log_level="warning", access_log=False)
