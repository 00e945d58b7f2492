"""Which calls need approval (``TOOL_APPROVAL_REQUIRED`` patterns) and what a decision object may hold."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kora.agent.approval_calls import Decision
from kora.agent.approvals import ApprovalPolicy, parse_approval_patterns
from kora.agent.settings import load_agent_settings
from kora.core.errors import RequestError
from kora.core.settings_errors import SettingsError

pytestmark = pytest.mark.unit

BASE = {"AGENT_NAME": "a", "MODEL_API_URL": "http://127.0.0.1:9/v1", "MODEL_NAME": "m"}


@pytest.mark.parametrize(
    ("patterns", "source", "tool", "required"),
    [
        ("files/delete", "files", "delete", True),
        ("files/delete", "files", "delete_all", False),
        ("files/delete_*", "files", "delete_all", True),
        ("files/*", "other", "delete", False),
        ("*/delete", "files", "delete", True),
        ("agents/*", "agents", "writer", True),
        ("agents/writer", "agents", "reader", False),
        ("*", "anything", "at_all", True),
        ("", "files", "delete", False),
        ("a.b/c+d", "a.b", "c+d", True),
        ("a.b/c+d", "axb", "c+d", False),
        ("files/delete, agents/writer", "agents", "writer", True),
    ],
)
def test_patterns_name_server_and_tool(patterns, source, tool, required):
    assert ApprovalPolicy.from_setting(patterns).requires(source, tool) is required


@given(st.text())
def test_any_setting_is_patterns_or_a_value_error(value):
    try:
        policy = ApprovalPolicy.from_setting(value)
    except ValueError:
        return
    for pattern in policy.patterns:
        assert pattern == "*" or pattern.count("/") == 1


@pytest.mark.parametrize("value", ["files", "/delete", "files/", "a/b/c", "files/delete,nothing"])
def test_a_bad_pattern_is_a_startup_error_naming_the_setting(value):
    with pytest.raises(ValueError, match="pattern"):
        parse_approval_patterns(value)
    with pytest.raises(SettingsError, match="TOOL_APPROVAL_REQUIRED"):
        load_agent_settings({**BASE, "TOOL_APPROVAL_REQUIRED": value})


def test_the_timeout_must_be_positive():
    with pytest.raises(SettingsError, match="TOOL_APPROVAL_TIMEOUT_SECONDS"):
        load_agent_settings({**BASE, "TOOL_APPROVAL_TIMEOUT_SECONDS": "0"})


def test_decisions_parse():
    assert Decision.parse({"decision": "approve"}) == Decision(True)
    assert Decision.parse({"decision": "reject", "reason": "no"}) == Decision(False, "no")
    assert Decision.parse({"decision": "approve", "arguments": {"a": 1}}) == Decision(True, "", {"a": 1})
    assert Decision.parse_text('{"decision": "reject"}', "x") == Decision(False)


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(), lambda c: st.lists(c) | st.dictionaries(st.text(), c)
    )
)
def test_any_json_is_a_decision_or_a_request_error(value):
    valid = (
        isinstance(value, dict)
        and set(value) <= {"decision", "reason", "arguments"}
        and value.get("decision") in ("approve", "reject")
        and isinstance(value.get("reason", ""), str)
        and (
            value.get("arguments") is None or (isinstance(value["arguments"], dict) and value["decision"] == "approve")
        )
    )
    if not valid:
        with pytest.raises(RequestError, match="Invalid value"):
            Decision.parse(value)
        return
    assert Decision.parse(value).approve is (value["decision"] == "approve")
