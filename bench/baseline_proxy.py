"""Baseline for bench_agent.py: a bare FastAPI proxy that forwards a chat request to the model and returns its JSON.

Run: ``MODEL_API_URL=http://127.0.0.1:PORT/v1 PROXY_PORT=N python bench/baseline_proxy.py``.
"""

import os

import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

MODEL_API_URL = os.environ["MODEL_API_URL"].rstrip("/")
client = httpx.AsyncClient(timeout=60)
app = FastAPI()


@app.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}


@app.post("/v1/chat/completions")
async def chat(request: Request) -> JSONResponse:
    body = await request.body()
    reply = await client.post(
        f"{MODEL_API_URL}/chat/completions", content=body, headers={"content-type": "application/json"}
    )
    return JSONResponse(reply.json(), status_code=reply.status_code)


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(os.environ["PROXY_PORT"]), log_level="warning", access_log=False)
