"""CPU per model request through each client stack Kora could use, measured in one run.

Why a turn sends its first model request directly (``kora/agent/runtime.py``): this prints the CPU one
chat-completions request costs the calling process through raw aiohttp, httpx2 over aiohttp (Kora's
``ModelClient``), httpx2's own transport, the openai client (both transports), pydantic-ai's
``OpenAIChatModel.request`` and ``Agent.run``, and ``Agent.run`` on an in-process ``FunctionModel`` (no I/O).

The scripted model (``kora model``) runs in its own process; each stack makes ``--calls`` requests at
concurrency 16 after 100 warm-up requests, on uvloop; CPU is this process's ``time.process_time()``.

Run: ``python bench/bench_model_clients.py [--calls N]`` (~30 s on 2 cores).
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable

import uvloop

from kora.core.net import free_port

BODY = {
    "model": "scripted",
    "messages": [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "hello there"}],
}


async def measure(call: Callable[[], Awaitable[object]], calls: int) -> tuple[float, float]:
    """(ms of CPU per call, calls per second) over ``calls`` calls at concurrency 16."""
    for _ in range(100):
        await call()
    gate = asyncio.Semaphore(16)

    async def one() -> None:
        async with gate:
            await call()

    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(one() for _ in range(calls)))
    return (time.process_time() - cpu) / calls * 1000, calls / (time.perf_counter() - wall)


async def stacks(
    url: str,
) -> tuple[list[tuple[str, Callable[[], Awaitable[object]]]], list[Callable[[], Awaitable[object]]]]:
    """The stacks to measure, and the coroutines that close their clients."""
    import aiohttp
    import httpx2
    from httpx_aiohttp.httpx2 import AiohttpTransport
    from openai import AsyncOpenAI, DefaultAioHttpClient
    from pydantic_ai import Agent, ModelRequest, ModelResponse, TextPart, UserPromptPart
    from pydantic_ai.models import ModelRequestParameters
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    endpoint = f"{url}/chat/completions"
    session = aiohttp.ClientSession()
    over_aiohttp = httpx2.AsyncClient(transport=AiohttpTransport())
    plain_httpx2 = httpx2.AsyncClient()
    openai_default = AsyncOpenAI(base_url=url, api_key="k")
    openai_aiohttp = AsyncOpenAI(base_url=url, api_key="k", http_client=DefaultAioHttpClient())
    model = OpenAIChatModel("scripted", provider=OpenAIProvider(openai_client=openai_default))
    messages = [ModelRequest(parts=[UserPromptPart("hello there")], instructions="You are helpful.")]
    agent = Agent(model, instructions="You are helpful.")
    in_process = Agent(FunctionModel(lambda _m, _i: ModelResponse(parts=[TextPart("hi")])), instructions="x")

    async def raw_aiohttp() -> object:
        async with session.post(endpoint, json=BODY) as response:
            return await response.json()

    async def httpx2_over_aiohttp() -> object:
        return (await over_aiohttp.post(endpoint, json=BODY)).json()

    async def httpx2_default() -> object:
        return (await plain_httpx2.post(endpoint, json=BODY)).json()

    closers = [session.close, over_aiohttp.aclose, plain_httpx2.aclose, openai_default.close, openai_aiohttp.close]
    return [
        ("aiohttp, raw", raw_aiohttp),
        ("httpx2 over aiohttp (Kora's ModelClient)", httpx2_over_aiohttp),
        ("httpx2, default transport", httpx2_default),
        ("openai client over aiohttp", lambda: openai_aiohttp.chat.completions.create(**BODY)),
        ("openai client, default", lambda: openai_default.chat.completions.create(**BODY)),
        ("pydantic-ai OpenAIChatModel.request", lambda: model.request(messages, None, ModelRequestParameters())),
        ("pydantic-ai Agent.run, same model", lambda: agent.run("hello there")),
        ("pydantic-ai Agent.run, FunctionModel (no I/O)", lambda: in_process.run("hello there")),
    ], closers


async def run(url: str, calls: int) -> None:
    print(f"{'one model request through':<48} {'CPU ms/call':>12} {'calls/s':>9}")
    measured, closers = await stacks(url)
    for name, call in measured:
        cpu, rate = await measure(call, calls)
        print(f"{name:<48} {cpu:>12.3f} {rate:>9.0f}", flush=True)
    for close in closers:
        await close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    port = free_port()
    model = subprocess.Popen(
        [sys.executable, "-m", "kora.cli", "model", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        print(f"bench: {calls_note(args.calls)}; scripted model on 127.0.0.1:{port}")
        uvloop.run(run(f"http://127.0.0.1:{port}/v1", args.calls))
    finally:
        model.terminate()
        model.wait()


def calls_note(calls: int) -> str:
    return f"{calls} calls per stack at concurrency 16 after 100 warm-up calls, Python {sys.version.split()[0]}"


if __name__ == "__main__":
    main()
