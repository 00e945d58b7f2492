"""``conversation`` of a Responses request (:func:`kora.agent.responses_api.conversation_of`): any value is either
the session id it names or a 400 naming ``conversation``, never an exception of another kind."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kora.agent.responses_api import conversation_of
from kora.core.errors import RequestError
from kora.core.protocol import SESSION_ID_PATTERN, is_session_id
from tests.support.hostile import any_text, hostile_values

pytestmark = pytest.mark.unit

conversations = st.one_of(
    hostile_values,
    any_text,
    st.from_regex(SESSION_ID_PATTERN, fullmatch=True),
    st.builds(lambda id_: {"id": id_}, st.one_of(hostile_values, st.from_regex(SESSION_ID_PATTERN, fullmatch=True))),
)


@given(value=conversations, previous=st.sampled_from([None, "resp_x"]))
def test_a_conversation_is_a_session_id_or_a_400_naming_it(value, previous):
    body = {"conversation": value, "previous_response_id": previous}
    id_ = value.get("id") if isinstance(value, dict) and set(value) == {"id"} else value
    if value is None or (previous is None and is_session_id(id_)):
        assert conversation_of(body) == id_
        return
    with pytest.raises(RequestError) as refused:
        conversation_of(body)
    assert (refused.value.status, refused.value.param) == (400, "conversation")
    assert refused.value.code in ("invalid_type", "invalid_value")


@pytest.mark.parametrize(("value", "session"), [("conv_1", "conv_1"), ({"id": "a.b:c-d"}, "a.b:c-d"), (None, None)])
def test_the_forms_openai_documents(value, session):
    assert conversation_of({"conversation": value}) == session
    assert conversation_of({}) is None
