"""The scripted model for structured output and summaries: rules on response_format and system messages,
the ``json`` reply shorthand, and the default answers (facts, conflicts, summaries)."""

import json

import pytest

from kora.scripted import ErrorReply, Match, Rule, ScriptedModel, ScriptError, TextReply, load_script
from kora.scripted.defaults import SUMMARY_LINE_WORDS, extract_facts, summarize
from kora.scripted.script import Conversation, reply_from_json

pytestmark = pytest.mark.unit

FACTS_SCHEMA = {
    "type": "object",
    "properties": {"facts": {"type": "array", "items": {"type": "string"}}},
    "required": ["facts"],
    "additionalProperties": False,
}


def schema_format(name, schema=None):
    return {"type": "json_schema", "json_schema": {"name": name, "strict": True, "schema": schema or FACTS_SCHEMA}}


def request(user_text, *, system=None, response_format=None):
    messages = [{"role": "system", "content": system}] if system is not None else []
    body = {"model": "scripted", "messages": [*messages, {"role": "user", "content": user_text}]}
    if response_format is not None:
        body["response_format"] = response_format
    return body


TURN = (
    "user: Hi! I live in Paris. Where can I get coffee?\nassistant: My favourite is Cafe Kitsune.\nuser: my dog is Rex"
)


# -- rules ---------------------------------------------------------------------------------------


def test_rules_match_on_the_json_schema_name_and_json_object():
    model = ScriptedModel(
        [
            Rule(Match(response_format="extracted_facts", user_matches="Paris"), TextReply('{"facts": ["Paris"]}')),
            Rule(Match(response_format="json_object"), TextReply('{"ok": true}')),
        ]
    )
    assert model.next_reply(request(TURN, response_format=schema_format("extracted_facts"))).text == (
        '{"facts": ["Paris"]}'
    )
    assert model.next_reply(request("x", response_format={"type": "json_object"})) == TextReply('{"ok": true}')
    # No response format, or another schema: the rules do not apply.
    assert model.next_reply(request("Paris")) == TextReply("You said: Paris")


def test_a_scripted_invalid_answer_once_then_a_valid_one():
    model = ScriptedModel(
        load_script(
            [
                {"when": {"response_format": "extracted_facts"}, "reply": "not json", "times": 1},
                {"when": {"response_format": "extracted_facts"}, "reply": {"json": {"facts": ["I like tea"]}}},
            ]
        )
    )
    body = request("user: hi", response_format=schema_format("extracted_facts"))
    assert [model.next_reply(body).text for _ in range(2)] == ["not json", '{"facts": ["I like tea"]}']


def test_system_matches_reads_system_and_developer_messages_and_fills_placeholders():
    model = ScriptedModel([Rule(Match(system_matches=r"in (?P<n>\d+) words"), TextReply("short: {n} {user}"))])
    body = request("text", system="Summarize in 40 words.")
    assert model.next_reply(body) == TextReply("short: 40 text")
    developer = {
        "messages": [{"role": "developer", "content": "summarize in 5 words"}, {"role": "user", "content": "a"}]
    }
    assert model.next_reply(developer) == TextReply("short: 5 a")
    assert model.next_reply(request("text")) == TextReply("You said: text")


def test_conversation_reads_the_response_format():
    assert Conversation(request("x", response_format=schema_format("f"))).response_format == "f"
    assert Conversation(request("x", response_format={"type": "json_schema"})).response_format == ""
    plain = Conversation(request("x", response_format={"type": "text"}))
    assert (plain.response_format, plain.response_kind) == (None, None)


def test_json_reply_shorthand_and_its_errors():
    assert reply_from_json({"json": {"facts": ["é"]}}) == TextReply('{"facts": ["é"]}')
    assert reply_from_json({"kind": "text", "json": []}) == TextReply("[]")
    with pytest.raises(ScriptError, match="not both"):
        reply_from_json({"json": {}, "text": "x"})
    with pytest.raises(ScriptError, match="plain JSON"):
        reply_from_json({"json": {"when": object()}})


def test_scripts_accept_the_new_conditions_and_reject_bad_ones():
    rules = load_script([{"when": {"response_format": "f", "system_matches": "^Sum"}, "reply": "r"}])
    assert rules == [Rule(Match(response_format="f", system_matches="^Sum"), TextReply("r"))]
    with pytest.raises(ScriptError, match="system_matches"):
        load_script([{"when": {"system_matches": "("}, "reply": "r"}])
    with pytest.raises(ScriptError, match="response_format"):
        load_script([{"when": {"response_format": 3}, "reply": "r"}])


# -- defaults ------------------------------------------------------------------------------------


def test_default_facts_are_the_users_first_person_statements():
    assert extract_facts(TURN) == ["I live in Paris.", "my dog is Rex"]
    assert extract_facts("USER:   I'm   a nurse!  I'm a nurse!\nuser: The sky is blue.\nI am not prefixed") == [
        "I'm a nurse!"
    ]
    assert extract_facts("assistant: I am the assistant") == []


def test_default_answers_to_structured_requests():
    model = ScriptedModel()
    facts = model.next_reply(request(TURN, response_format=schema_format("extracted_facts")))
    assert json.loads(facts.text) == {"facts": ["I live in Paris.", "my dog is Rex"]}
    conflicts = model.next_reply(request("new: x\nf1: y", response_format=schema_format("fact_conflicts")))
    assert json.loads(conflicts.text) == {"contradicted": []}
    assert model.next_reply(request("x", response_format={"type": "json_object"})) == TextReply("{}")
    unknown = model.next_reply(request("x", response_format=schema_format("invoice")))
    assert isinstance(unknown, ErrorReply)
    assert (unknown.status, unknown.code) == (400, "no_scripted_rule")
    assert "'invoice'" in unknown.message


def test_default_summary_condenses_lines_and_does_not_nest():
    body = request("user: I live in   Paris\nassistant: Nice!\n\nuser: I live in Paris", system="Summarize this.")
    first = ScriptedModel().next_reply(body)
    assert first == TextReply("Summary:\n- user: I live in Paris\n- assistant: Nice!")
    again = request(f"{first.text}\nuser: I have a dog", system="summarise the conversation")
    assert ScriptedModel().next_reply(again).text == (
        "Summary:\n- user: I live in Paris\n- assistant: Nice!\n- user: I have a dog"
    )
    assert ScriptedModel().next_reply(request("   ", system="Summarize")).text == "Summary: (nothing to summarize)"


def test_default_summary_cuts_long_lines_and_keeps_the_earliest_within_the_budget():
    long_line = " ".join(f"w{i}" for i in range(100))
    text = summarize(Conversation(request(long_line + "\n" + "\n".join(f"line {i} " * 10 for i in range(40)))))
    lines = text.splitlines()
    assert lines[1] == "- " + " ".join(f"w{i}" for i in range(SUMMARY_LINE_WORDS)) + " ..."
    assert lines[2].startswith("- line 0 ")
    assert 100 < len(text.split()) < 260
    assert "line 39" not in text
