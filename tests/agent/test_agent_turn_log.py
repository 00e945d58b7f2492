"""One INFO line per turn (kora.agent.turn_log) from a real agent on 127.0.0.1: session, steps, tools called,
tokens, time, how it ended; never the user's text."""

import logging
import re

import openai
import pytest

from kora.scripted import ErrorReply, TextReply, ToolCall, ToolCallReply
from tests.support.agent import mcp_app, running_agent
from tests.support.threaded import ThreadedServer

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("turn_path")]

LINE = re.compile(
    r"^turn session=(?P<session>\S+) steps=(?P<steps>\d+) tools=(?P<tools>\S+) "
    r"tokens=(?P<input>\d+)\+(?P<output>\d+) ms=(?P<ms>\d+) finish=(?P<finish>\S+)$"
)


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def turn_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, str]]:
    lines = [record for record in caplog.records if record.name == "kora.agent.turn"]
    assert all(record.levelno == logging.INFO for record in lines)
    matched = [LINE.match(record.getMessage()) for record in lines]
    assert all(matched), [record.getMessage() for record in lines]
    return [m.groupdict() for m in matched if m]


async def test_each_turn_writes_one_line_with_its_steps_tools_tokens_and_end(model, caplog):
    caplog.set_level(logging.INFO, logger="kora.agent.turn")
    model.enqueue(ToolCallReply([ToolCall("add", {"a": 2, "b": 3})]), TextReply("2 + 3 = 5"), TextReply("hello"))
    async with (
        ThreadedServer(mcp_app("calc", [add]), name="calc", lifespan="on") as calc,
        running_agent(model, MCP_SERVERS="calc", MCP_SERVER_CALC_URL=calc.root_url) as agent,
    ):
        client = agent.openai()
        answer = client.chat.completions.create(
            model="a",
            messages=[{"role": "user", "content": "secret sum 2 and 3"}],
            extra_headers={"X-Session-ID": "t1"},
        )
        stream = client.chat.completions.create(
            model="a", messages=[{"role": "user", "content": "hi"}], stream=True, extra_headers={"X-Session-ID": "t2"}
        )
        assert "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices) == "hello"
        model.enqueue(ErrorReply(500, "backend down"))
        with pytest.raises(openai.APIStatusError) as failed:
            client.chat.completions.create(
                model="a", messages=[{"role": "user", "content": "x"}], extra_headers={"X-Session-ID": "t3"}
            )
    first, second, third = turn_lines(caplog)
    usage = answer.usage
    assert usage is not None
    assert first == {
        "session": "t1",
        "steps": "2",
        "tools": "add",
        "input": str(usage.prompt_tokens),
        "output": str(usage.completion_tokens),
        "ms": first["ms"],
        "finish": "stop",
    }
    assert (second["session"], second["steps"], second["tools"], second["finish"]) == ("t2", "1", "-", "stop")
    assert (third["session"], third["tools"]) == ("t3", "-")
    assert third["finish"] == failed.value.body["code"]
    assert not any("secret" in record.getMessage() for record in caplog.records if record.name == "kora.agent.turn")
