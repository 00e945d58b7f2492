"""The scripted model's pure logic: reply choice, rules, placeholders, coercion, usage, script format."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kora.scripted import (
    ErrorReply,
    Match,
    Rule,
    ScriptedModel,
    ScriptError,
    TextReply,
    ToolCall,
    ToolCallReply,
    count_usage,
    load_script,
    load_script_file,
    reply_from_json,
    reply_to_json,
    split_chunks,
)

pytestmark = pytest.mark.unit

ADD_TOOL = {
    "type": "function",
    "function": {
        "name": "add",
        "parameters": {
            "type": "object",
            "properties": {
                "a": {"type": "integer"},
                "b": {"type": "number"},
                "exact": {"type": "boolean"},
                "note": {"type": "string"},
                "maybe": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
                "nested": {"type": "object", "properties": {"n": {"type": "integer"}}},
                "many": {"type": "array", "items": {"type": "integer"}},
            },
        },
    },
}


def user(text, **extra):
    return {"model": "scripted", "messages": [{"role": "user", "content": text}], **extra}


def after_tool(user_text, result):
    return {
        "model": "scripted",
        "messages": [
            {"role": "user", "content": user_text},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2}'}}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": result},
        ],
    }


# -- default replies and the queue ---------------------------------------------------------------


def test_default_echoes_the_last_user_message():
    model = ScriptedModel()
    body = {
        "messages": [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "x"},
            user("second")["messages"][0],
        ]
    }
    assert model.next_reply(body) == TextReply("You said: second")


def test_default_after_a_tool_result_reports_it():
    assert ScriptedModel().next_reply(after_tool("add", "5")) == TextReply("Tool result: 5")


def test_content_parts_are_read_as_text():
    body = {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]}
    assert ScriptedModel().next_reply(body) == TextReply("You said: a\nb")


def test_queue_is_fifo_and_comes_before_rules():
    model = ScriptedModel([Rule(Match(), TextReply("rule"))])
    model.enqueue(TextReply("one"), "two")
    assert model.queued == 2
    assert [model.next_reply(user("x")) for _ in range(3)] == [TextReply("one"), TextReply("two"), TextReply("rule")]


def test_every_request_is_recorded_in_order():
    model = ScriptedModel()
    bodies = [user("a"), user("b", model="other")]
    for body in bodies:
        model.next_reply(body)
    assert model.requests == bodies
    assert model.model_names == ["scripted", "other"]


def test_max_recorded_drops_the_oldest():
    model = ScriptedModel(max_recorded=2)
    for text in "abc":
        model.next_reply(user(text))
    assert [r["messages"][0]["content"] for r in model.requests] == ["b", "c"]


def test_reset_clears_queue_records_and_rules_unless_kept():
    model = ScriptedModel([Rule(Match(), TextReply("rule"), times=1)])
    model.enqueue("queued")
    model.next_reply(user("a"))
    model.next_reply(user("b"))
    model.record_abort(user("c"))
    model.reset(keep_rules=True)
    assert (model.requests, model.aborted_requests, model.queued) == ([], [], 0)
    assert model.next_reply(user("d")) == TextReply("rule")  # its times counter was reset too
    model.reset()
    assert model.rules == []


# -- rules ---------------------------------------------------------------------------------------


def test_first_matching_rule_wins_and_times_is_respected():
    model = ScriptedModel(
        [
            Rule(Match(user_matches="hello"), TextReply("hi once"), times=1),
            Rule(Match(user_matches="hel+o"), TextReply("hi again")),
        ]
    )
    assert [model.next_reply(user("hello")).text for _ in range(2)] == ["hi once", "hi again"]
    assert model.next_reply(user("bye")) == TextReply("You said: bye")


def test_after_tool_and_tool_available_conditions():
    model = ScriptedModel(
        [
            Rule(Match(after_tool=True), TextReply("done: {tool_result} for {user}")),
            Rule(Match(tool_available="add", after_tool=False), TextReply("can add")),
        ]
    )
    assert model.next_reply(after_tool("sum it", "5")) == TextReply("done: 5 for sum it")
    assert model.next_reply(user("x", tools=[ADD_TOOL])) == TextReply("can add")
    assert model.next_reply(user("x")) == TextReply("You said: x")


def test_regex_groups_fill_tool_arguments_with_schema_coercion():
    call = ToolCall(
        "add",
        {
            "a": "{a}",
            "b": "{b}",
            "exact": "{flag}",
            "note": "{a}",
            "maybe": "{a}",
            "nested": {"n": "{a}"},
            "many": ["{a}", "{a}"],
            "other": "{a} and {missing}",
        },
    )
    model = ScriptedModel(
        [Rule(Match(user_matches=r"add (?P<a>\d+) and (?P<b>[\d.]+) (?P<flag>\w+)"), ToolCallReply([call], "ok {a}"))]
    )
    reply = model.next_reply(user("please add 2 and 3.5 yes", tools=[ADD_TOOL]))
    assert isinstance(reply, ToolCallReply)
    assert reply.text == "ok 2"
    assert reply.calls[0].arguments == {
        "a": 2,
        "b": 3.5,
        "exact": True,
        "note": "2",
        "maybe": 2,
        "nested": {"n": 2},
        "many": [2, 2],
        "other": "2 and {missing}",  # unknown placeholders stay; no schema, no coercion
    }


def test_coercion_leaves_unparsable_values_and_tools_without_schema_alone():
    rule = Rule(Match(user_matches=r"(?P<a>\w+)"), ToolCallReply([ToolCall("add", {"a": "{a}", "b": "7"})]))
    model = ScriptedModel([rule], max_recorded=None)
    reply = model.next_reply(user("seven", tools=[ADD_TOOL]))
    assert isinstance(reply, ToolCallReply)
    assert reply.calls[0].arguments == {"a": "seven", "b": 7}
    reply = model.next_reply(user("7"))  # no tools offered: nothing to coerce against
    assert isinstance(reply, ToolCallReply)
    assert reply.calls[0].arguments == {"a": "7", "b": "7"}


def test_queued_replies_get_user_and_tool_result_placeholders():
    model = ScriptedModel()
    model.enqueue(TextReply("got {tool_result}"), ErrorReply(503, "busy with {user}"))
    assert model.next_reply(after_tool("q", "42")) == TextReply("got 42")
    assert model.next_reply(user("q")) == ErrorReply(503, "busy with q")


def test_explicit_chunks_are_filled_and_kept():
    model = ScriptedModel([Rule(Match(user_matches="(?P<w>world)"), TextReply("hi {w}", chunks=["hi ", "{w}"]))])
    assert model.next_reply(user("world")) == TextReply("hi world", chunks=["hi ", "world"])


def test_bad_reply_values_raise_script_error():
    with pytest.raises(ScriptError):
        TextReply("abc", chunks=["a", "b"])
    with pytest.raises(ScriptError):
        ErrorReply(200, "not an error")
    with pytest.raises(ScriptError):
        ToolCallReply([])
    with pytest.raises(ScriptError):
        Match(user_matches="(unclosed")


# -- chunks and usage ----------------------------------------------------------------------------


@given(st.text())
def test_chunks_concatenate_back_to_the_text(text):
    assert "".join(split_chunks(text)) == text


def test_chunks_are_words_with_leading_whitespace():
    assert split_chunks("Hello big  world ") == ["Hello", " big", "  world", " "]
    assert split_chunks("") == []


def test_usage_counts_words_of_messages_tool_arguments_and_reply():
    body = after_tool("add two numbers", "5")  # 3 + tool args '{"a": 2}' (2) + "5" (1)
    assert count_usage(body, TextReply("The sum is 5")).to_json() == {
        "prompt_tokens": 6,
        "completion_tokens": 4,
        "total_tokens": 10,
    }
    calls = ToolCallReply([ToolCall("add", {"a": 2, "b": 3})])  # '{"a": 2, "b": 3}' -> 4 words
    assert count_usage(body, calls).completion_tokens == 4
    assert count_usage(body, ToolCallReply([ToolCall("noop")])).completion_tokens == 1
    assert count_usage({"messages": []}, TextReply("")).total_tokens == 0


# -- JSON form and script files ------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [
        TextReply("hi there", chunks=["hi", " there"], delay_seconds=0.5, chunk_delay_seconds=0.1),
        ToolCallReply([ToolCall("add", {"a": 1})], text="calling", disconnect_after_chunks=2),
        ErrorReply(429, "slow down", type="rate_limit_error", code="rate_limit_exceeded", delay_seconds=1),
    ],
)
def test_reply_json_round_trip(reply):
    assert reply_from_json(json.loads(json.dumps(reply_to_json(reply)))) == reply


def test_reply_json_shorthands():
    assert reply_from_json("plain") == TextReply("plain")
    assert reply_from_json({"calls": [{"name": "f"}]}) == ToolCallReply([ToolCall("f", {})])
    assert reply_from_json({"status": 500, "message": "boom"}) == ErrorReply(500, "boom")
    assert reply_from_json({"chunks": ["a", "b"]}) == TextReply("ab", chunks=["a", "b"])


@pytest.mark.parametrize(
    "data",
    [
        {"kind": "audio"},
        {"kind": "text"},
        {"kind": "text", "text": "x", "delay_seconds": -1},
        {"kind": "tool_calls", "calls": []},
        {"kind": "tool_calls", "calls": [{"name": "f", "arguments": [1]}]},
        {"kind": "error", "status": "500", "message": "x"},
        {"kind": "text", "text": "x", "disconnect_after_chunks": 1.5},
        42,
    ],
)
def test_malformed_replies_raise_script_error(data):
    with pytest.raises(ScriptError):
        reply_from_json(data)


def test_load_script_accepts_a_list_or_a_rules_mapping():
    rules = load_script([{"when": {"user_matches": "hi"}, "reply": "hello", "times": 2}, {"reply": "anything"}])
    assert rules == [Rule(Match(user_matches="hi"), TextReply("hello"), 2), Rule(Match(), TextReply("anything"))]
    assert load_script({"rules": []}) == []
    assert load_script({}) == []


@pytest.mark.parametrize(
    "data",
    [
        "text",
        [{"when": {}}],
        [{"when": {"user_text": "x"}, "reply": "r"}],
        [{"when": {"after_tool": "yes"}, "reply": "r"}],
        [{"when": {"user_matches": "("}, "reply": "r"}],
        [{"reply": "r", "times": -1}],
    ],
)
def test_malformed_scripts_raise_script_error(data):
    with pytest.raises(ScriptError):
        load_script(data)


YAML_SCRIPT = r"""
rules:
  - when: {after_tool: true, user_matches: 'add (?P<a>\d+) and (?P<b>\d+)'}
    reply: "The sum of {a} and {b} is {tool_result}"
  - when: {user_matches: 'add (?P<a>\d+) and (?P<b>\d+)', tool_available: add}
    reply:
      kind: tool_calls
      calls: [{name: add, arguments: {a: "{a}", b: "{b}"}}]
"""


def test_yaml_script_file_drives_a_tool_round_trip(tmp_path):
    path = tmp_path / "script.yaml"
    path.write_text(YAML_SCRIPT)
    model = ScriptedModel(load_script_file(path))
    first = model.next_reply(user("add 2 and 3", tools=[ADD_TOOL]))
    assert isinstance(first, ToolCallReply)
    assert first.calls == [ToolCall("add", {"a": 2, "b": 3})]
    assert model.next_reply(after_tool("add 2 and 3", "5")) == TextReply("The sum of 2 and 3 is 5")


def test_json_script_file_and_errors(tmp_path):
    good = tmp_path / "script.json"
    good.write_text(json.dumps([{"when": {"user_matches": "ping"}, "reply": {"kind": "text", "text": "pong"}}]))
    assert load_script_file(good) == [Rule(Match(user_matches="ping"), TextReply("pong"))]
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("rules: [unclosed")
    with pytest.raises(ScriptError, match=r"bad\.yaml"):
        load_script_file(bad_yaml)
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{")
    with pytest.raises(ScriptError):
        load_script_file(bad_json)
    with pytest.raises(FileNotFoundError):
        load_script_file(tmp_path / "missing.yaml")
