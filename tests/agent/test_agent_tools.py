"""The agentic loop with real MCP tool servers, a real peer agent, and memory tools."""

import asyncio

import httpx
import pytest

from kora.scripted import TextReply, ToolCall, ToolCallReply
from tests.support.a2a import message_params, rpc_body
from tests.support.agent import mcp_app, running_agent
from tests.support.eventually import eventually
from tests.support.threaded import ThreadedServer

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("turn_path")]


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def lookup(key: str) -> str:
    """Look a key up in the reference table."""
    return {"pi": "3.14159"}.get(key, "unknown")


def other_lookup(key: str) -> str:
    """Same name as another server's tool, different answer."""
    return f"other:{key}"


def tool_messages(request):
    return [m for m in request["messages"] if m["role"] == "tool"]


async def test_the_model_calls_an_mcp_tool_and_sees_its_result(model):
    model.enqueue(ToolCallReply([ToolCall("add", {"a": 2, "b": 3})]), TextReply("2 + 3 = 5"))
    async with (
        ThreadedServer(mcp_app("calc", [add]), name="calc", lifespan="on") as calc,
        running_agent(model, MCP_SERVERS="calc", MCP_SERVER_CALC_URL=calc.root_url) as agent,
    ):
        answer = agent.openai().chat.completions.create(
            model="a", messages=[{"role": "user", "content": "add 2 and 3"}], extra_headers={"X-Session-ID": "t"}
        )
        assert answer.choices[0].message.content == "2 + 3 = 5"
        assert [m["content"] for m in tool_messages(model.requests[-1])] == ["5"]
        assert any(t["function"]["name"] == "add" for t in model.requests[0]["tools"])
        events = agent.events("t")
        assert [e["event_type"] for e in events] == ["user_message", "tool_call", "tool_result", "agent_response"]
        assert events[1]["content"]["tool_name"] == "add"
        assert events[1]["content"]["args"] == {"a": 2, "b": 3}
        assert events[2]["content"]["content"] == 5


async def test_tools_endpoint_lists_mcp_tools_with_schemas(model):
    async with (
        ThreadedServer(mcp_app("calc", [add]), name="calc", lifespan="on") as calc,
        running_agent(model, MCP_SERVERS="calc", MCP_SERVER_CALC_URL=calc.root_url) as agent,
    ):
        tools = agent.get("/tools").json()["tools"]
        (tool,) = tools
        assert tool["name"] == "add"
        assert tool["description"] == "Add two integers."
        assert tool["source"] == "mcp:calc"
        assert tool["parameters"]["properties"]["a"]["type"] == "integer"
        assert set(tool["parameters"]["required"]) == {"a", "b"}


async def test_tool_names_stay_unique_across_servers(model):
    def lookup_elsewhere(key: str) -> str:
        """Same MCP tool name as alpha's, different answer."""
        return other_lookup(key)

    lookup_elsewhere.__name__ = "lookup"  # the MCP SDK names a tool after its function
    model.enqueue(ToolCallReply([ToolCall("beta_lookup", {"key": "pi"})]), TextReply("done"))
    async with (
        ThreadedServer(mcp_app("alpha", [lookup]), name="alpha", lifespan="on") as alpha,
        ThreadedServer(mcp_app("beta", [lookup_elsewhere]), name="beta", lifespan="on") as beta,
        running_agent(
            model, MCP_SERVERS="alpha,beta", MCP_SERVER_ALPHA_URL=alpha.root_url, MCP_SERVER_BETA_URL=beta.root_url
        ) as agent,
    ):
        names = sorted(t["name"] for t in agent.get("/tools").json()["tools"])
        assert names == ["alpha_lookup", "beta_lookup"]
        agent.openai().chat.completions.create(model="a", messages=[{"role": "user", "content": "pi?"}])
        assert [m["content"] for m in tool_messages(model.requests[-1])] == ["other:pi"]


async def test_ready_names_an_unreachable_tool_server_and_recovers_when_it_comes_back(model):
    placeholder = ThreadedServer(mcp_app("calc", [add]), name="calc", lifespan="on")
    placeholder.start()
    url = placeholder.root_url
    placeholder.stop()  # the port is now closed: the server is "down"
    async with running_agent(model, wait_ready=False, MCP_SERVERS="calc", MCP_SERVER_CALC_URL=url) as agent:
        eventually(lambda: "calc" in str(agent.get("/ready").json().get("reasons")), "not-ready reason")
        response = agent.get("/ready")
        assert response.status_code == 503
        assert "mcp server 'calc'" in response.json()["reasons"][0]
        assert agent.get("/health").status_code == 200
        # Bring a server up on the same port: the agent reconnects and becomes ready.
        import uvicorn

        from kora.core.net import bind_socket

        port = int(url.rsplit(":", 1)[1])
        sock = bind_socket("127.0.0.1", port)
        server = uvicorn.Server(uvicorn.Config(mcp_app("calc", [add]), log_config=None, log_level="warning"))
        task = asyncio.get_running_loop().run_in_executor(None, lambda: server.run(sockets=[sock]))
        try:
            await asyncio.to_thread(
                eventually, lambda: agent.get("/ready").status_code == 200, "ready after recovery", within=20.0
            )
            assert [t["name"] for t in agent.get("/tools").json()["tools"]] == ["add"]
        finally:
            server.should_exit = True
            await task


async def test_delegation_to_a_peer_agent_records_events_on_both_sides(model):
    # The parent's model delegates; the child's model (same scripted server) answers; the parent concludes.
    model.enqueue(
        ToolCallReply([ToolCall("delegate_to_child", {"task": "summarise kora"})]),
        TextReply("Kora is an agent runtime."),
        TextReply("The child says: Kora is an agent runtime."),
    )
    async with running_agent(model, name="child") as child:
        async with running_agent(model, name="parent", AGENT_SUB_AGENTS=f"child:{child.url}") as parent:
            tools = parent.get("/tools").json()["tools"]
            assert [(t["name"], t["source"]) for t in tools] == [("delegate_to_child", "delegation")]
            answer = parent.openai().chat.completions.create(
                model="a", messages=[{"role": "user", "content": "ask the child"}], extra_headers={"X-Session-ID": "p"}
            )
            assert answer.choices[0].message.content == "The child says: Kora is an agent runtime."
            assert parent.event_types("p") == [
                "user_message",
                "delegation_request",
                "delegation_response",
                "agent_response",
            ]
            request, response = parent.events("p")[1:3]
            assert request["content"]["agent"] == "child"
            assert request["content"]["task"] == "summarise kora"
            assert response["content"]["response"] == "Kora is an agent runtime."
            child_events = child.events()
            assert [e["event_type"] for e in child_events] == ["task_delegation_received", "agent_response"]
            assert child_events[0]["metadata"]["from_agent"] == "parent"
            assert child_events[0]["content"] == "summarise kora"


async def test_peers_from_the_orchestrator_format_become_delegation_tools(model):
    async with running_agent(model, name="child") as child:
        async with running_agent(
            model, name="parent", PEER_AGENTS="child", PEER_AGENT_CHILD_CARD_URL=child.url
        ) as parent:
            assert [t["name"] for t in parent.get("/tools").json()["tools"]] == ["delegate_to_child"]


async def test_a_peer_that_is_down_gives_the_model_error_text_not_a_crash(model):
    model.enqueue(ToolCallReply([ToolCall("delegate_to_ghost", {"task": "hello?"})]), TextReply("ghost is away"))
    async with running_agent(model, AGENT_SUB_AGENTS="ghost:http://127.0.0.1:9") as agent:
        answer = agent.openai().chat.completions.create(model="a", messages=[{"role": "user", "content": "hi"}])
        assert answer.choices[0].message.content == "ghost is away"
        (result,) = tool_messages(model.requests[-1])
        assert result["content"].startswith("Error: could not reach agent 'ghost'")


async def test_the_step_budget_ends_the_turn_with_a_clear_message_and_an_error_event(model):
    """Over chat (``finish_reason: "length"``) and A2A (task ``failed``): both steps that ran are kept with
    their usage, then the ``error`` event says why the turn ended."""
    model.enqueue(*[ToolCallReply([ToolCall("add", {"a": 1, "b": i})]) for i in range(4)])
    async with (
        ThreadedServer(mcp_app("calc", [add]), name="calc", lifespan="on") as calc,
        running_agent(
            model, AGENTIC_LOOP_MAX_STEPS="2", MCP_SERVERS="calc", MCP_SERVER_CALC_URL=calc.root_url
        ) as agent,
    ):
        answer = agent.openai().chat.completions.create(
            model="a", messages=[{"role": "user", "content": "loop"}], extra_headers={"X-Session-ID": "b"}
        )
        assert answer.choices[0].finish_reason == "length"
        assert "limit of 2 model requests" in answer.choices[0].message.content
        assert len(model.requests) == 2
        # Usage is what the two requests really cost (the scripted model counts words).
        assert answer.usage.prompt_tokens > 0
        assert answer.usage.completion_tokens > 0
        events = agent.events("b")
        assert [e["event_type"] for e in events] == ["user_message", *["tool_call", "tool_result"] * 2, "error"]
        assert [e["content"]["content"] for e in events if e["event_type"] == "tool_result"] == [1, 2]
        assert events[-1]["content"]["error_type"] == "step_limit"

        body = httpx.post(agent.url, json=rpc_body("message/send", message_params("loop", "t")), timeout=30).json()
        task = body["result"]
        assert task["status"]["state"] == "failed"
        assert "limit of 2 model requests" in task["status"]["message"]["parts"][0]["text"]
        assert not task.get("artifacts")
        assert agent.event_types("t") == ["user_message", *["tool_call", "tool_result"] * 2, "error"]


async def test_memory_tools_save_and_search_with_levels_up_to_the_read_scope(model):
    model.enqueue(
        ToolCallReply([ToolCall("save_memory", {"content": "the deploy window is Tuesday"})]),
        TextReply("noted"),
        ToolCallReply([ToolCall("search_memory", {"query": "deploy window", "level": "session"})]),
        TextReply("found it"),
    )
    async with running_agent(model, MEMORY_TOOLS="all") as agent:
        tools = {t["name"]: t for t in agent.get("/tools").json()["tools"]}
        assert set(tools) == {"search_memory", "save_memory"}
        assert tools["search_memory"]["parameters"]["properties"]["level"]["enum"] == ["session"]
        assert "level" not in tools["save_memory"]["parameters"]["properties"]
        client = agent.openai()
        for text in ("remember it", "when is it?"):
            client.chat.completions.create(
                model="a", messages=[{"role": "user", "content": text}], extra_headers={"X-Session-ID": "m"}
            )
        (found,) = tool_messages(model.requests[-1])[-1:]
        assert "the deploy window is Tuesday" in found["content"]


async def test_memory_tools_follow_the_memory_tools_setting(model):
    async with running_agent(model, MEMORY_TOOLS="read") as agent:
        (tool,) = agent.get("/tools").json()["tools"]
        assert tool["name"] == "search_memory"
        assert tool["parameters"]["properties"]["level"]["enum"] == ["session"]
    async with running_agent(model, MEMORY_TOOLS="write") as agent:
        assert [t["name"] for t in agent.get("/tools").json()["tools"]] == ["save_memory"]
    async with running_agent(model) as agent:
        assert agent.get("/tools").json()["tools"] == []


async def test_a_client_that_disconnects_mid_stream_aborts_the_model_request(model):
    model.enqueue(TextReply("a b c d e f g h i j", chunk_delay_seconds=0.3))
    async with running_agent(model) as agent:
        body = {"model": "a", "stream": True, "messages": [{"role": "user", "content": "go"}]}
        with httpx.stream("POST", f"{agent.url}/v1/chat/completions", json=body) as response:
            for line in response.iter_lines():
                if '"content":"a"' in line:
                    break
        assert await model.wait_for_aborts(1, within=5.0)


async def test_streamed_text_around_a_tool_call_stays_readable(model):
    model.enqueue(ToolCallReply([ToolCall("add", {"a": 2, "b": 2})], text="Let me add."), TextReply("It is 4."))
    async with (
        ThreadedServer(mcp_app("calc", [add]), name="calc", lifespan="on") as calc,
        running_agent(model, MCP_SERVERS="calc", MCP_SERVER_CALC_URL=calc.root_url) as agent,
    ):
        stream = agent.openai().chat.completions.create(
            model="a", messages=[{"role": "user", "content": "2+2"}], stream=True
        )
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert text == "Let me add.\n\nIt is 4."
