"""The agent's OpenAI-compatible chat endpoint, driven by the official openai client against real servers."""

import asyncio

import httpx
import openai
import pytest

from kora.scripted import ErrorReply, TextReply
from tests.support.agent import running_agent
from tests.support.eventually import eventually_async

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("turn_path")]


async def test_non_streaming_completion_has_openai_shape_and_the_models_usage(model):
    async with running_agent(model) as agent:
        raw = agent.openai().chat.completions.with_raw_response.create(
            model="agent", messages=[{"role": "user", "content": "hello there"}]
        )
        completion = raw.parse()
        assert completion.object == "chat.completion"
        assert completion.id.startswith("chatcmpl-")
        assert completion.created > 0
        assert completion.model == "agent"
        assert completion.choices[0].message.role == "assistant"
        assert completion.choices[0].message.content == "You said: hello there"
        assert completion.choices[0].finish_reason == "stop"
        # The scripted model counts words: the usage must be what the model reported, passed through.
        sent = model.requests[-1]
        words = sum(len(str(m.get("content") or "").split()) for m in sent["messages"])
        assert completion.usage.prompt_tokens == words
        assert completion.usage.completion_tokens == 4
        assert completion.usage.total_tokens == words + 4
        assert raw.headers["x-session-id"].startswith("ses_")


async def test_async_client_and_a_session_id_in_the_body(model):
    async with running_agent(model) as agent:
        client = agent.async_openai()
        raw = await client.chat.completions.with_raw_response.create(
            model="agent", messages=[{"role": "user", "content": "one"}], extra_body={"session_id": "body-session"}
        )
        assert raw.headers["x-session-id"] == "body-session"
        assert raw.parse().choices[0].message.content == "You said: one"
        assert agent.event_types("body-session") == ["user_message", "agent_response"]


async def test_streaming_sends_the_answer_token_by_token_then_finish_and_done(model):
    model.enqueue(TextReply("The quick brown fox jumps", chunk_delay_seconds=0.05))
    async with running_agent(model) as agent:
        stream = agent.openai().chat.completions.create(
            model="agent",
            messages=[{"role": "user", "content": "tell me"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        arrivals, pieces, finish, usage = [], [], None, None
        loop = asyncio.get_running_loop()
        for chunk in stream:
            assert chunk.object == "chat.completion.chunk"
            if chunk.usage:
                usage = chunk.usage
            for choice in chunk.choices:
                if choice.delta.content:
                    pieces.append(choice.delta.content)
                    arrivals.append(loop.time())
                finish = choice.finish_reason or finish
        assert "".join(pieces) == "The quick brown fox jumps"
        assert len(pieces) >= 5, "the answer must arrive in pieces, not as one chunk at the end"
        # Pieces arrive spread out as the model sends them (50 ms apart), not bunched at the end.
        assert arrivals[-1] - arrivals[0] >= 0.15
        assert finish == "stop"
        assert usage is not None
        assert usage.completion_tokens == 5


async def test_raw_stream_ends_with_done(model):
    async with running_agent(model) as agent:
        body = {"model": "a", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        with httpx.stream("POST", f"{agent.url}/v1/chat/completions", json=body) as response:
            lines = [line for line in response.iter_lines() if line]
        assert response.headers["content-type"].startswith("text/event-stream")
        assert lines[-1] == "data: [DONE]"
        # Like OpenAI: no usage-only chunk (empty choices) unless stream_options.include_usage asks for it.
        assert not any('"usage"' in line for line in lines)
        assert '"finish_reason":"stop"' in lines[-2]


async def test_a_session_replays_earlier_turns_as_history(model):
    async with running_agent(model) as agent:
        client = agent.openai()
        first = client.chat.completions.with_raw_response.create(
            model="a", messages=[{"role": "user", "content": "my name is Ada"}]
        )
        session = first.headers["x-session-id"]
        client.chat.completions.create(
            model="a",
            messages=[{"role": "user", "content": "what is my name?"}],
            extra_headers={"X-Session-ID": session},
        )
        replayed = [(m["role"], m["content"]) for m in model.requests[-1]["messages"] if m["role"] != "system"]
        assert replayed == [
            ("user", "my name is Ada"),
            ("assistant", "You said: my name is Ada"),
            ("user", "what is my name?"),
        ]


async def test_exactly_memory_context_limit_events_are_replayed(model):
    async with running_agent(model, MEMORY_CONTEXT_LIMIT="3") as agent:
        client = agent.openai()
        for i in range(4):
            client.chat.completions.create(
                model="a", messages=[{"role": "user", "content": f"turn {i}"}], extra_headers={"X-Session-ID": "s"}
            )
        history = [m for m in model.requests[-1]["messages"] if m["role"] != "system"][:-1]
        assert [m["content"] for m in history] == ["You said: turn 1", "turn 2", "You said: turn 2"]
        assert len(agent.events("s")) == 8


async def test_a_new_session_uses_the_history_a_plain_openai_client_sends(model):
    async with running_agent(model) as agent:
        agent.openai().chat.completions.create(
            model="a",
            messages=[
                {"role": "system", "content": "Answer in French."},
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "salut"},
                {"role": "user", "content": "how are you"},
            ],
        )
        sent = model.requests[-1]["messages"]
        assert [m["role"] for m in sent if m["role"] != "system"] == ["user", "assistant", "user"]
        assert any("Answer in French." in str(m["content"]) for m in sent if m["role"] == "system")


async def test_concurrent_turns_in_one_session_are_serialised_and_nothing_is_lost(model):
    async with running_agent(model) as agent:
        client = agent.async_openai()
        await asyncio.gather(
            *(
                client.chat.completions.create(
                    model="a", messages=[{"role": "user", "content": f"m{i}"}], extra_headers={"X-Session-ID": "c"}
                )
                for i in range(12)
            )
        )
        types = agent.event_types("c")
        assert len(types) == 24
        assert types == ["user_message", "agent_response"] * 12


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"{not json", "invalid_json"),
        (b"[]", "invalid_json"),
        (b'{"model": "a"}', "missing_messages"),
        (b'{"model": "a", "messages": []}', "missing_messages"),
        (b'{"model": "a", "messages": [{"role": "system", "content": "x"}]}', "no_user_message"),
        (b'{"model": "a", "messages": [{"content": "no role"}]}', "invalid_value"),
    ],
)
async def test_bad_requests_get_400_in_openai_error_format(model, body, code):
    async with running_agent(model) as agent:
        response = httpx.post(
            f"{agent.url}/v1/chat/completions", content=body, headers={"content-type": "application/json"}
        )
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["code"] == code
        assert error["type"] == "invalid_request_error"
        assert error["message"]
        assert model.requests == []


async def test_openai_client_raises_bad_request_for_no_user_message(model):
    async with running_agent(model) as agent:
        with pytest.raises(openai.BadRequestError) as caught:
            agent.openai().chat.completions.create(model="a", messages=[{"role": "assistant", "content": "x"}])
        assert caught.value.status_code == 400


async def test_a_failing_model_api_gives_502_and_an_error_event(model):
    model.enqueue(ErrorReply(500, "backend exploded"))
    async with running_agent(model) as agent:
        with pytest.raises(openai.APIStatusError) as caught:
            agent.openai().chat.completions.create(
                model="a", messages=[{"role": "user", "content": "hi"}], extra_headers={"X-Session-ID": "f"}
            )
        assert caught.value.status_code == 502
        assert "backend exploded" in caught.value.body["message"]
        events = agent.events("f")
        assert [e["event_type"] for e in events] == ["user_message", "error"]
        assert events[1]["content"]["error_type"] == "model_error"


async def test_a_slow_model_api_gives_504(model):
    model.enqueue(TextReply("late", delay_seconds=5))
    async with running_agent(model, MODEL_TIMEOUT_SECONDS="0.5") as agent:
        with pytest.raises(openai.APIStatusError) as caught:
            agent.openai().chat.completions.create(
                model="a", messages=[{"role": "user", "content": "hi"}], extra_headers={"X-Session-ID": "t"}
            )
        assert caught.value.status_code == 504
        assert agent.event_types("t") == ["user_message", "error"]


async def test_a_model_failure_mid_stream_is_reported_in_the_stream(model):
    model.enqueue(ErrorReply(503, "overloaded"))
    async with running_agent(model) as agent:
        body = {"model": "a", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        with httpx.stream(
            "POST", f"{agent.url}/v1/chat/completions", json=body, headers={"X-Session-ID": "ms"}
        ) as response:
            lines = [line for line in response.iter_lines() if line]
        assert any('"error"' in line and "overloaded" in line for line in lines)
        assert lines[-1] == "data: [DONE]"
        assert agent.event_types("ms") == ["user_message", "error"]


async def test_unknown_v1_path_is_an_openai_404(model):
    async with running_agent(model) as agent:
        response = httpx.post(f"{agent.url}/v1/nothing", json={})
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"


async def test_a_client_that_goes_away_mid_stream_leaves_the_prompt_and_an_error_event(model):
    model.enqueue(TextReply("a b c d e f g h", chunk_delay_seconds=0.3))
    async with running_agent(model) as agent:
        body = {"model": "a", "stream": True, "messages": [{"role": "user", "content": "go"}]}
        with httpx.stream(
            "POST", f"{agent.url}/v1/chat/completions", json=body, headers={"X-Session-ID": "gone"}
        ) as response:
            for line in response.iter_lines():
                if '"content":"a"' in line:
                    break
        assert await model.wait_for_aborts(1, within=5.0)
        await eventually_async(
            lambda: agent.event_types("gone") == ["user_message", "error"], "the aborted turn's events stored"
        )
        events = agent.events("gone")
        assert [e["event_type"] for e in events] == ["user_message", "error"]
        assert events[1]["content"]["error_type"] == "cancelled"
