"""The boundary's rules as pure functions: JSON limits on raw bytes, session ids, storable text, byte-limit settings."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kora.core.errors import RequestError
from kora.core.limits import MAX_JSON_DEPTH, MAX_NUMBER_DIGITS, json_problem
from kora.core.protocol import MAX_SESSION_ID_CHARS, check_session_id, child_session_id, is_session_id
from kora.core.text import may_hold_unstorable, unstorable_location

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1), "nests deeper"),
        (b"[[]" * (MAX_JSON_DEPTH + 1), "nests deeper"),  # depth grows without a long run of openers
        (b"[" * 10_000, "nests deeper"),  # unclosed
        (b'{"n":' + b"9" * (MAX_NUMBER_DIGITS + 1) + b"}", "digits"),
        (b"[1." + b"5" * MAX_NUMBER_DIGITS + b"]", "digits"),
        (b"[1e400]", "too large"),
        (b"[-9.9E+308]", "too large"),
        (b"[NaN]", "not JSON"),
        (b"[-Infinity]", "not JSON"),
    ],
)
def test_json_beyond_the_limits_is_named(body, fragment):
    problem = json_problem(body)
    assert problem is not None
    assert fragment in problem


@pytest.mark.parametrize(
    "body",
    [
        b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH,
        b'{"text": "[[[[[[ NaN Infinity 1e999 ' + b"9" * 500 + b'"}',  # inside a string: text, not structure
        b'{"escaped": "\\" [[[[ \\\\"}',
        b"[1e-999, 1.7e308, 12345678901234567890]",
        b"not json at all",
    ],
)
def test_json_within_the_limits_passes(body):
    assert json_problem(body) is None


def test_session_id_rule():
    assert is_session_id("ses_0123abcd")
    assert is_session_id("a.b:c-d_e")
    assert is_session_id("x" * MAX_SESSION_ID_CHARS)
    for bad in ["", "x" * (MAX_SESSION_ID_CHARS + 1), "a b", "a/b", "é", "a\r\nb", "a\x00", "\udc80", 5, None]:
        assert not is_session_id(bad), bad
    with pytest.raises(RequestError, match="X-Session-ID must be 1-128 characters") as refused:
        check_session_id("a\nb", "X-Session-ID")
    assert refused.value.status == 400
    assert refused.value.jsonrpc_code == -32602


@given(parent=st.from_regex(r"[A-Za-z0-9._:-]{1,128}", fullmatch=True), name=st.text(min_size=1, max_size=80))
def test_a_delegated_session_id_is_always_valid_and_stable(parent, name):
    child = child_session_id(parent, name)
    assert is_session_id(child)
    assert child == child_session_id(parent, name)


def test_a_short_parent_keeps_its_readable_child_id():
    assert child_session_id("ses_1", "math") == "ses_1.math"


def test_unstorable_location_names_the_field():
    assert unstorable_location({"messages": [{"role": "user", "content": "ok"}]}) is None
    assert unstorable_location({"messages": [{"content": "a\udc80"}]}) == "messages.0.content"
    assert unstorable_location({"meta": {"k\x00": 1}}) == "meta.k?"
    assert unstorable_location("\ud800") == ""
    deep: object = "\x00"
    for _ in range(5000):  # iterative: no recursion limit
        deep = [deep]
    assert unstorable_location(deep) is not None


#: Any text, NUL and lone surrogates included (``st.text()`` leaves surrogates out).
_ANY_TEXT = st.text(st.characters(exclude_categories=()))
_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | _ANY_TEXT,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_ANY_TEXT, children, max_size=4),
    max_leaves=12,
)


@given(value=_JSON_VALUES, ensure_ascii=st.booleans(), encoding=st.sampled_from(["utf-8", "utf-16", "utf-32"]))
def test_a_body_said_to_hold_no_unstorable_text_holds_none(value, ensure_ascii, encoding):
    # Every way a client can write the value: escaped or raw, any encoding json.loads reads.
    raw = json.dumps(value, ensure_ascii=ensure_ascii).encode(encoding, "surrogatepass")
    if not may_hold_unstorable(raw):
        assert unstorable_location(json.loads(raw)) is None


def test_the_raw_body_scan_sees_every_way_of_writing_unstorable_text():
    assert not may_hold_unstorable(b'{"messages": [{"role": "user", "content": "caf\xc3\xa9 \\n \\" ok"}]}')
    assert may_hold_unstorable(b'{"content": "a\\u0000"}')  # an escaped NUL
    assert may_hold_unstorable(b'{"content": "a\\udc80"}')  # an escaped lone surrogate
    assert may_hold_unstorable('{"content": "a\udc80"}'.encode("utf-8", "surrogatepass"))  # a raw one
    assert may_hold_unstorable('{"content": "x"}'.encode("utf-16"))  # another encoding: always walked
