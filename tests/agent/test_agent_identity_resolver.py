"""The identity resolver on hostile input: any trusted-header value and any bearer string either gives a user id
that is safe to store and forward, or the client's error (400 / 401), never anything else."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.datastructures import Headers

from kora.agent.identity import ANONYMOUS, MAX_USER_ID_LENGTH, Identity, IdentityResolver, user_id_problem
from kora.agent.settings import load_agent_settings
from kora.core.errors import RequestError, Unauthenticated
from tests.support.identity import IdentityProvider, KeySet, jwks_app
from tests.support.threaded import ThreadedServer

pytestmark = pytest.mark.unit

REQUIRED = {"AGENT_NAME": "a", "MODEL_API_URL": "http://model:8000/v1", "MODEL_NAME": "m"}
HEADER = "X-Forwarded-User"

#: Header values as they arrive: any bytes but the line breaks and NUL no HTTP parser lets through.
RAW_VALUES = st.one_of(
    st.binary(max_size=300).filter(lambda raw: not set(raw) & {0, 10, 13}),
    st.text(max_size=300)
    .map(lambda text: text.encode("utf-8", "surrogatepass"))
    .filter(lambda raw: not set(raw) & {0, 10, 13}),
    st.just(b"x" * MAX_USER_ID_LENGTH),
    st.just(b"x" * (MAX_USER_ID_LENGTH + 1)),
)


def resolver(**env: str) -> IdentityResolver:
    return IdentityResolver(load_agent_settings(REQUIRED | env))


def headers(*items: tuple[str, bytes]) -> Headers:
    return Headers(raw=[(name.lower().encode(), value) for name, value in items])


async def resolve_or_refuse(resolving: IdentityResolver, sent: Headers) -> Identity | RequestError:
    try:
        return await resolving.resolve(sent)
    except RequestError as error:
        return error


@settings(max_examples=400, deadline=None)
@given(RAW_VALUES)
def test_a_trusted_header_value_is_a_safe_user_id_or_a_400(raw: bytes) -> None:
    outcome = asyncio.run(resolve_or_refuse(resolver(AUTH_TRUSTED_USER_HEADER=HEADER), headers((HEADER, raw))))
    if isinstance(outcome, RequestError):
        assert outcome.status == 400
        assert HEADER in outcome.message
        return
    user = outcome.user_id
    assert user is not None
    assert user == raw.decode("latin-1").strip()
    assert 1 <= len(user) <= MAX_USER_ID_LENGTH
    assert all(" " <= char <= "~" for char in user)  # visible ASCII and spaces only
    assert outcome.credential == {HEADER: user}


@settings(max_examples=100, deadline=None)
@given(RAW_VALUES)
def test_without_the_setting_the_header_is_never_read(raw: bytes) -> None:
    assert asyncio.run(resolver().resolve(headers((HEADER, raw)))) is ANONYMOUS


#: Characters a user id must not hold: C0/C1 controls, DEL, format characters (bidi overrides, zero width),
#: line and paragraph separators, and spaces that look like U+0020.
HOSTILE_CHARS = st.sampled_from(
    ["\x00", "\t", "\n", "\r", "\x1b", "\x7f", "\x85", "\u00a0", "\u200b", "\u202e", "\u2028", "\u2029", "\u3000"]
)
SAFE_TEXT = st.text(st.characters(categories=["L", "N", "P", "S"]), min_size=1, max_size=100)


@given(SAFE_TEXT, HOSTILE_CHARS, st.integers(min_value=0, max_value=100))
def test_user_id_problem_refuses_a_hostile_character_anywhere(text: str, hostile: str, at: int) -> None:
    assert user_id_problem(text) is None
    assert user_id_problem(text[:at] + hostile + text[at:]) == "contains control characters"


def test_user_id_problem_refuses_blank_and_overlong_ids() -> None:
    assert user_id_problem(" ") == "is empty"
    assert user_id_problem("x" * MAX_USER_ID_LENGTH) is None
    assert user_id_problem("x" * (MAX_USER_ID_LENGTH + 1)) == f"is longer than {MAX_USER_ID_LENGTH} characters"
    assert user_id_problem("Ada Lovelace") is None


@pytest.fixture(scope="module")
def provider():
    keys = KeySet()
    keys.add("k1")
    with ThreadedServer(jwks_app(keys), name="jwks", lifespan="off") as server:
        yield IdentityProvider(keys, server)


TOKEN_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
BEARER_STRINGS = st.one_of(
    st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=400),
    # Three base64url-looking segments: past the first split, into header and claim decoding.
    st.lists(st.text(alphabet=TOKEN_CHARS, max_size=80), min_size=3, max_size=3).map(".".join),
)


@settings(max_examples=300, deadline=None)
@given(BEARER_STRINGS)
def test_any_bearer_string_that_is_not_a_token_of_the_key_set_is_a_401(provider, token: str) -> None:
    verifying = resolver(AUTH_JWT_JWKS_URL=provider.jwks_url)
    with pytest.raises(Unauthenticated) as caught:
        asyncio.run(verifying.resolve(headers(("Authorization", f"Bearer {token}".encode()))))
    assert caught.value.status == 401


def test_a_token_of_the_key_set_gives_its_subject_and_forwards_itself(provider) -> None:
    verifying = resolver(AUTH_JWT_JWKS_URL=provider.jwks_url, AUTH_JWT_AUDIENCE="kora-agents")
    token = provider.keys.token("zoe")
    identity = asyncio.run(verifying.resolve(headers(("Authorization", f"bearer {token}".encode()))))
    assert identity.user_id == "zoe"
    assert identity.credential == {"Authorization": f"Bearer {token}"}
    assert token not in repr(identity)
