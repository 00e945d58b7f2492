"""Fault drills of the turn pipeline: each fault has its documented outcome, the steps that
ran stay stored, the outcome (``finish_reason``, task state, ``error`` event) says how the turn ended, and the
agent keeps serving afterwards.

Drills covered elsewhere (not repeated here): model down / 500 / 503 mid-stream / slow beyond its timeout and a
client leaving mid-stream (``test_agent_chat.py``), the step budget (``test_agent_tools.py``), a peer down, hung or
slower than the delegation timeout and a failing peer task (``test_a2a_delegation.py``), and every tool fault at the
tool server's own protocol (``test_mcp_server.py``); here each tool fault is driven through an agent's turn.
"""

import asyncio
import json
import signal
import threading

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletion

from kora.core.net import free_port
from kora.scripted import ErrorReply, TextReply, ToolCall, ToolCallReply
from tests.support.a2a import message_params, rpc_body
from tests.support.agent import RunningAgent, running_agent
from tests.support.eventually import eventually, eventually_async
from tests.support.mcp import running_mcp, start_cli, wait_ready, wait_until_ready

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("turn_path")]


def stream_lines(agent: RunningAgent, session: str, text: str = "hi") -> list[str]:
    body = {"model": "a", "stream": True, "messages": [{"role": "user", "content": text}]}
    with httpx.stream(
        "POST", f"{agent.url}/v1/chat/completions", json=body, headers={"X-Session-ID": session}, timeout=30
    ) as response:
        assert response.status_code == 200
        return [line for line in response.iter_lines() if line]


def asked_in_background(
    agent: RunningAgent, session: str, *, timeout: float
) -> tuple[threading.Thread, list[ChatCompletion]]:
    """A thread asking ``agent`` to "sleep" in ``session`` (Chat Completions, the client's ``timeout`` in seconds),
    started; the list its answer is put in."""
    answers: list[ChatCompletion] = []

    def ask() -> None:
        answers.append(
            agent.openai(timeout=timeout).chat.completions.create(
                model="a", messages=[{"role": "user", "content": "sleep"}], extra_headers={"X-Session-ID": session}
            )
        )

    asker = threading.Thread(target=ask)
    asker.start()
    return asker, answers


def chunks(lines: list[str]) -> list[dict]:
    return [json.loads(line.removeprefix("data: ")) for line in lines if line != "data: [DONE]"]


def still_serves(agent: RunningAgent, model, session: str = "after") -> None:
    model.enqueue(TextReply("still here"))
    answer = agent.openai().chat.completions.create(
        model="a", messages=[{"role": "user", "content": "ping"}], extra_headers={"X-Session-ID": session}
    )
    assert answer.choices[0].message.content == "still here"
    assert agent.event_types(session) == ["user_message", "agent_response"]


async def test_a_stream_cut_mid_answer_is_an_error_not_a_stop(model):
    model.enqueue(TextReply("the whole answer would be this", end_after_chunks=2))
    async with running_agent(model) as agent:
        lines = stream_lines(agent, "cut")
        sent = chunks(lines)
        assert lines[-1] == "data: [DONE]"
        assert not any(c.get("choices") and c["choices"][0].get("finish_reason") == "stop" for c in sent)
        (error,) = [c["error"] for c in sent if "error" in c]
        assert "stream ended before the answer was complete" in error["message"]
        events = agent.events("cut")
        assert [e["event_type"] for e in events] == ["user_message", "error"]
        assert events[1]["content"]["error_type"] == "model_error"
        still_serves(agent, model)


async def test_a_stream_cut_after_a_tool_step_keeps_the_step(model):
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    from tests.support.agent import mcp_app
    from tests.support.threaded import ThreadedServer

    model.enqueue(ToolCallReply([ToolCall("add", {"a": 1, "b": 2})]), TextReply("it is three", end_after_chunks=1))
    async with (
        ThreadedServer(mcp_app("calc", [add]), name="calc", lifespan="on") as calc,
        running_agent(model, MCP_SERVERS="calc", MCP_SERVER_CALC_URL=calc.root_url) as agent,
    ):
        sent = chunks(stream_lines(agent, "cut2"))
        assert any("error" in c for c in sent)
        events = agent.events("cut2")
        assert [e["event_type"] for e in events] == ["user_message", "tool_call", "tool_result", "error"]
        assert events[2]["content"]["content"] == 3
        still_serves(agent, model)


async def test_a_task_whose_model_stream_is_cut_ends_failed(model):
    model.enqueue(TextReply("never whole", end_after_chunks=1))
    async with running_agent(model) as agent:
        body = httpx.post(agent.url, json=rpc_body("message/send", message_params("hi", "cut3")), timeout=30).json()
        assert body["result"]["status"]["state"] == "failed"
        assert agent.event_types("cut3") == ["user_message", "error"]
        still_serves(agent, model)


@pytest.mark.parametrize(
    ("reply", "status"),
    [(ErrorReply(429, "slow down"), 502), (ErrorReply(500, "boom"), 502), (ErrorReply(400, "bad"), 502)],
)
async def test_model_error_statuses_give_an_error_event_and_the_agent_serves_on(model, reply, status):
    model.enqueue(reply)
    async with running_agent(model) as agent:
        with pytest.raises(openai.APIStatusError) as caught:
            agent.openai().chat.completions.create(
                model="a", messages=[{"role": "user", "content": "hi"}], extra_headers={"X-Session-ID": "st"}
            )
        assert caught.value.status_code == status
        assert reply.message in caught.value.body["message"]
        assert agent.event_types("st") == ["user_message", "error"]
        still_serves(agent, model)


async def test_a_model_that_answers_garbage_is_a_502_with_an_error_event():
    """A model API that answers 200 with a body that is no chat completion (an HTML error page, a proxy's
    banner): built on a raw socket server, as the scripted model only speaks valid OpenAI."""
    port = free_port()

    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        body = b"<html>upstream says hello</html>"
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(garbage, "127.0.0.1", port)

    class Garbage:
        url = f"http://127.0.0.1:{port}/v1"
        model_name = "garbage"

    try:
        async with running_agent(Garbage()) as agent:  # type: ignore[arg-type]
            response = await asyncio.to_thread(
                httpx.post,
                f"{agent.url}/v1/chat/completions",
                json={"model": "a", "messages": [{"role": "user", "content": "hi"}]},
                headers={"X-Session-ID": "g"},
                timeout=30,
            )
            assert response.status_code == 502
            assert "invalid answer" in response.json()["error"]["message"]
            assert agent.event_types("g") == ["user_message", "error"]
            streamed = await asyncio.to_thread(stream_lines, agent, "g2")
            assert any("error" in c for c in chunks(streamed))
            assert agent.event_types("g2") == ["user_message", "error"]
    finally:
        server.close()
        await server.wait_closed()


async def test_a_model_that_is_down_is_a_502_and_a_failed_task_with_error_events_every_time():
    """Nothing listens at the model's address: each turn ends 502 (chat) or ``failed`` (A2A) with its prompt
    and an ``error`` event stored, and the agent keeps answering."""

    class Down:
        url = f"http://127.0.0.1:{free_port()}/v1"
        model_name = "down"

    async with running_agent(Down(), wait_ready=False) as agent:  # type: ignore[arg-type]
        for session in ("d1", "d2"):
            response = await asyncio.to_thread(
                httpx.post,
                f"{agent.url}/v1/chat/completions",
                json={"model": "a", "messages": [{"role": "user", "content": "hi"}]},
                headers={"X-Session-ID": session},
                timeout=30,
            )
            assert response.status_code == 502
            assert "could not be reached" in response.json()["error"]["message"]
            assert agent.event_types(session) == ["user_message", "error"]
        body = await asyncio.to_thread(
            httpx.post, agent.url, json=rpc_body("message/send", message_params("hi", "d3")), timeout=30
        )
        assert body.json()["result"]["status"]["state"] == "failed"
        assert agent.event_types("d3") == ["user_message", "error"]


SLOW_TOOL = '''
import time


def slow(seconds: float, started: str = "") -> str:
    """Creates the file ``started`` (when named), sleeps, then answers."""
    if started:
        open(started, "w").close()
    time.sleep(seconds)
    return "slept"
'''


async def test_a_tool_server_killed_mid_call_gives_a_failed_result_and_comes_back(model, tmp_path):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    args = ["--host", "127.0.0.1", "--port", str(port)]
    process = start_cli(args, {"MCP_TOOLS_STRING": SLOW_TOOL})
    try:
        wait_ready(base, process)
        started = tmp_path / "started"
        call = ToolCall("slow", {"seconds": 30, "started": str(started)})
        model.enqueue(ToolCallReply([call]), TextReply("the tool went away"))
        async with running_agent(model, MCP_SERVERS="t", MCP_SERVER_T_URL=f"{base}/mcp") as agent:
            asker, answers = asked_in_background(agent, "k", timeout=60)
            await eventually_async(started.exists, "the tool running")  # the call is in flight
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=10)
            await asyncio.to_thread(asker.join, 60)
            (answer,) = answers
            assert answer.choices[0].message.content == "the tool went away"
            events = agent.events("k")
            assert [e["event_type"] for e in events] == ["user_message", "tool_call", "tool_result", "agent_response"]
            result = events[2]
            assert result["metadata"]["outcome"] == "failed"
            assert str(result["content"]["content"]).startswith("Error: the tool server 't' failed")
            # Restarted on the same port: the supervisor reconnects and the tool works again.
            process = start_cli(args, {"MCP_TOOLS_STRING": SLOW_TOOL})
            wait_ready(base, process)
            eventually(lambda: agent.get("/ready").status_code == 200, "reconnected", within=30)
            model.enqueue(ToolCallReply([ToolCall("slow", {"seconds": 0})]), TextReply("done"))
            again = agent.openai().chat.completions.create(
                model="a", messages=[{"role": "user", "content": "sleep"}], extra_headers={"X-Session-ID": "k2"}
            )
            assert again.choices[0].message.content == "done"
            assert agent.events("k2")[2]["content"]["content"] == "slept"
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)


async def test_a_hung_tool_server_fails_the_call_in_flight_once_its_ping_fails(model, tmp_path):
    """A tool server that stops answering (SIGSTOP) mid-call: the supervisor's ping finds it down, and the call in
    flight fails then as a lost call (the model is told), rather than waiting for the server to wake up. The call
    timeout is set far beyond the ping's so that only the ping can end the call."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    process = start_cli(["--host", "127.0.0.1", "--port", str(port)], {"MCP_TOOLS_STRING": SLOW_TOOL})
    try:
        wait_ready(base, process)
        started = tmp_path / "started"
        call = ToolCall("slow", {"seconds": 5, "started": str(started)})
        model.enqueue(ToolCallReply([call]), TextReply("the tool server hung"))
        environ = {"MCP_SERVERS": "t", "MCP_SERVER_T_URL": f"{base}/mcp", "MCP_CALL_TIMEOUT_SECONDS": "3600"}
        async with running_agent(model, **environ) as agent:
            asker, answers = asked_in_background(agent, "h", timeout=300)
            await eventually_async(started.exists, "the tool running")  # the call is in flight
            process.send_signal(signal.SIGSTOP)
            # The ping gives up after 30 s: the answer comes well before the stopped server could ever answer.
            await asyncio.to_thread(asker.join, 240)
            (answer,) = answers
            assert answer.choices[0].message.content == "the tool server hung"
            events = agent.events("h")
            assert [e["event_type"] for e in events] == ["user_message", "tool_call", "tool_result", "agent_response"]
            result = events[2]
            assert result["metadata"]["outcome"] == "failed"
            assert str(result["content"]["content"]).startswith(
                "Error: the tool server 't' failed during the call to 'slow': the server is down (lost connection"
            )
    finally:
        process.send_signal(signal.SIGCONT)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)


async def test_a_tool_call_past_the_call_timeout_is_a_failed_result_and_the_turn_goes_on(model):
    """``MCP_CALL_TIMEOUT_SECONDS`` bounds each call of a tool server's tool: a call past it (here the server would
    let the tool run 30 s) is given up, reported to the model as a failed call, and the server stays usable."""
    model.enqueue(ToolCallReply([ToolCall("slow", {"seconds": 30})]), TextReply("too slow"))
    with running_mcp({"MCP_TOOLS_STRING": SLOW_TOOL}) as server:
        wait_until_ready(server.root_url)
        environ = {"MCP_SERVERS": "t", "MCP_SERVER_T_URL": f"{server.root_url}/mcp", "MCP_CALL_TIMEOUT_SECONDS": "1"}
        async with running_agent(model, **environ) as agent:
            answer = agent.openai(timeout=60).chat.completions.create(
                model="a", messages=[{"role": "user", "content": "sleep"}], extra_headers={"X-Session-ID": "s"}
            )
            assert answer.choices[0].message.content == "too slow"
            events = agent.events("s")
            assert [e["event_type"] for e in events] == ["user_message", "tool_call", "tool_result", "agent_response"]
            assert events[2]["metadata"]["outcome"] == "failed"
            assert events[2]["content"]["content"] == (
                "Error: the tool server 't' failed during the call to 'slow': no answer within 1 s"
            )
            assert agent.get("/ready").status_code == 200  # a slow call is no lost server
            model.enqueue(ToolCallReply([ToolCall("slow", {"seconds": 0})]), TextReply("done"))
            again = agent.openai().chat.completions.create(
                model="a", messages=[{"role": "user", "content": "sleep"}], extra_headers={"X-Session-ID": "s2"}
            )
            assert again.choices[0].message.content == "done"
            assert agent.events("s2")[2]["content"]["content"] == "slept"


def not_a_number() -> float:
    """Promises a float and returns NaN."""
    return float("nan")


def boom() -> str:
    """Raises."""
    raise RuntimeError("tool exploded")


@pytest.mark.parametrize(
    ("tool", "expected"),
    [
        (
            not_a_number,
            "Error: the tool server 'odd' failed during the call to 'not_a_number': "
            "Invalid structured content returned by tool not_a_number: None is not of type 'number'",
        ),
        (boom, "Error executing tool boom"),
    ],
)
async def test_a_third_party_tool_server_breaking_its_schema_or_raising_gives_error_text(model, tool, expected):
    """A tool server Kora does not run (the official SDK's): its own failures reach the model as error text, the
    turn goes on, no validator internals reach the client."""
    from tests.support.agent import mcp_app
    from tests.support.threaded import ThreadedServer

    model.enqueue(ToolCallReply([ToolCall(tool.__name__, {})]), TextReply("the tool failed"))
    async with (
        ThreadedServer(mcp_app("odd", [tool]), name="odd", lifespan="on") as odd,
        running_agent(model, MCP_SERVERS="odd", MCP_SERVER_ODD_URL=odd.root_url) as agent,
    ):
        answer = agent.openai().chat.completions.create(
            model="a", messages=[{"role": "user", "content": "go"}], extra_headers={"X-Session-ID": "odd"}
        )
        assert answer.choices[0].message.content == "the tool failed"
        events = agent.events("odd")
        assert [e["event_type"] for e in events] == ["user_message", "tool_call", "tool_result", "agent_response"]
        assert events[2]["content"]["content"] == expected
        assert events[2]["metadata"]["outcome"] == "failed"
        still_serves(agent, model)


FAULTY_TOOLS = '''
import os
import time


def hang() -> str:
    """Never finishes."""
    time.sleep(600)
    return "never"


def die() -> str:
    """Ends its own process."""
    os._exit(1)


def fail() -> str:
    """Raises."""
    raise ValueError("nope")


def not_json() -> list:
    """Returns a set, which JSON cannot carry."""
    return {1, 2}


def not_a_number() -> float:
    """Promises a float and returns NaN, which its output schema (JSON) cannot carry."""
    return float("nan")


def wrong_type() -> int:
    """Returns text although it promises an integer."""
    return "seven"


def odd_names() -> list[str]:
    """File names as os.listdir gives them for bytes that are not UTF-8: lone surrogates."""
    return ["caf\\udce9.txt"]


def echo(text: str) -> str:
    """Answers its argument."""
    return text
'''


@pytest.fixture(scope="module")
def faulty_tools():
    """``kora mcp`` serving FAULTY_TOOLS with two workers and a 1 s timeout for ``hang``."""
    environ = {"MCP_TOOLS_STRING": FAULTY_TOOLS, "MCP_TOOL_WORKERS": "2", "MCP_TOOL_TIMEOUTS": "hang=1"}
    with running_mcp(environ) as server:
        wait_until_ready(server.root_url)
        yield server


@pytest.mark.parametrize(
    ("tool", "expected"),
    [
        ("hang", "Error: tool 'hang' did not finish within 1 s and was stopped"),
        ("die", "Error: tool 'die' crashed: its worker process exited (exit code 1)"),
        ("fail", "Error: ValueError: nope"),
        ("not_json", "Error: TypeError: the tool returned a value that cannot be sent as JSON"),
        ("not_a_number", "Error: TypeError: the tool returned a value that cannot be sent as JSON"),
        ("wrong_type", "Error: tool 'wrong_type' returned a value that does not match its return type"),
    ],
)
async def test_a_kora_mcp_tool_that_hangs_exits_raises_or_returns_what_json_cannot_carry(
    model, faulty_tools, tool, expected
):
    """Each fault reaches the model as ``Error: ...`` text, the turn answers, its tool_call and tool_result are
    stored with outcome ``failed``, and both the tool server and the agent serve on."""
    model.enqueue(ToolCallReply([ToolCall(tool, {})]), TextReply("the tool failed"))
    async with running_agent(model, MCP_SERVERS="faulty", MCP_SERVER_FAULTY_URL=faulty_tools.root_url) as agent:
        answer = await asyncio.to_thread(
            agent.openai(timeout=60).chat.completions.create,
            model="a",
            messages=[{"role": "user", "content": "go"}],
            extra_headers={"X-Session-ID": tool},
        )
        assert answer.choices[0].message.content == "the tool failed"
        (result,) = [m for m in model.requests[-1]["messages"] if m["role"] == "tool"]
        # A model API has no error flag on a tool result: pydantic-ai marks a failed one by wrapping its text.
        assert json.loads(result["content"])["error"].startswith(expected)
        events = agent.events(tool)
        assert [e["event_type"] for e in events] == ["user_message", "tool_call", "tool_result", "agent_response"]
        assert str(events[2]["content"]["content"]).startswith(expected)
        assert events[2]["metadata"]["outcome"] == "failed"
        # The tool server (both its workers) still calls tools.
        for n in range(3):
            model.enqueue(ToolCallReply([ToolCall("echo", {"text": f"back {n}"})]), TextReply("echoed"))
            await asyncio.to_thread(
                agent.openai().chat.completions.create,
                model="a",
                messages=[{"role": "user", "content": "echo"}],
                extra_headers={"X-Session-ID": f"{tool}-{n}"},
            )
            assert agent.events(f"{tool}-{n}")[2]["content"]["content"] == f"back {n}"
        await asyncio.to_thread(still_serves, agent, model)


async def test_a_kora_mcp_tool_returning_undecodable_file_names_gives_escape_text(model, faulty_tools):
    model.enqueue(ToolCallReply([ToolCall("odd_names", {})]), TextReply("listed"))
    async with running_agent(model, MCP_SERVERS="faulty", MCP_SERVER_FAULTY_URL=faulty_tools.root_url) as agent:
        answer = await asyncio.to_thread(
            agent.openai().chat.completions.create,
            model="a",
            messages=[{"role": "user", "content": "ls"}],
            extra_headers={"X-Session-ID": "ls"},
        )
        assert answer.choices[0].message.content == "listed"
        events = agent.events("ls")
        assert "outcome" not in events[2]["metadata"]  # a success
        assert events[2]["content"]["content"] == ["caf\\udce9.txt"]  # the escape as text
        await asyncio.to_thread(still_serves, agent, model)
