"""Where kora up finds secretKeyRef values (kora.local.secrets): --secret-env from the shell, else the manifests'
Secret documents; anything else is refused with a message saying how to give it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kora.local.secrets import SecretSource, parse_secret_env
from kora.resources import load_text

pytestmark = pytest.mark.unit

MANIFESTS = """
apiVersion: kora.dev/v1alpha1
kind: ModelAPI
metadata: {name: m}
spec:
  mode: Proxy
  proxyConfig: {apiBase: 'http://127.0.0.1:9/v1', apiKey: {valueFrom: {secretKeyRef: {name: openai, key: api-key}}}}
"""
IN_THE_MANIFESTS = (
    MANIFESTS
    + """
---
apiVersion: v1
kind: Secret
metadata: {name: openai}
stringData: {api-key: from-the-manifests}
"""
)


def test_a_variable_gives_the_value_and_wins_over_a_secret_document():
    given_env = parse_secret_env(["openai/api-key=KEY", "team/db/url=DB"], {"KEY": "sk-1", "DB": "postgres://"})
    assert given_env == {("default", "openai", "api-key"): "sk-1", ("team", "db", "url"): "postgres://"}
    source = SecretSource(given_env)
    assert source.value(load_text(MANIFESTS), "default", "openai", "api-key") == "sk-1"
    assert source.value(load_text(IN_THE_MANIFESTS), "default", "openai", "api-key") == "sk-1"
    assert SecretSource().value(load_text(IN_THE_MANIFESTS), "default", "openai", "api-key") == "from-the-manifests"
    assert source.unused(load_text(MANIFESTS)) == [("team", "db", "url")]


def test_a_reference_given_nowhere_says_both_ways_to_give_it():
    with pytest.raises(LookupError) as raised:
        SecretSource().value(load_text(MANIFESTS), "default", "openai", "api-key")
    message = str(raised.value)
    assert message.startswith("Secret default/openai key 'api-key' is not in the manifests; add a v1 Secret document")
    assert "kora up --secret-env openai/api-key=VARIABLE" in message


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        ("openai=KEY", "expected [NAMESPACE/]NAME/KEY=VARIABLE"),
        ("openai/api-key", "expected [NAMESPACE/]NAME/KEY=VARIABLE"),
        ("openai/api-key=1KEY", "expected"),
        ("a/b/c/d=KEY", "expected"),
        ("openai/api-key=UNSET", "the variable UNSET is not set (or empty) in this shell"),
        ("openai/api-key=EMPTY", "the variable EMPTY is not set (or empty) in this shell"),
    ],
)
def test_a_bad_option_is_refused_naming_it(option: str, expected: str):
    with pytest.raises(ValueError, match="--secret-env") as raised:
        parse_secret_env([option], {"KEY": "x", "EMPTY": ""})
    assert expected in str(raised.value)


def test_the_same_key_twice_is_refused():
    with pytest.raises(ValueError, match="given twice"):
        parse_secret_env(["openai/api-key=A", "default/openai/api-key=B"], {"A": "1", "B": "2"})


@given(st.text(max_size=60))
def test_any_option_is_parsed_or_refused_with_a_value_error(option: str):
    problem = None
    try:
        parsed = parse_secret_env([option], {"V": "value"})
    except ValueError as error:
        problem = str(error)
    if problem is None:
        assert list(parsed.values()) == ["value"]
    else:
        assert problem.startswith("--secret-env")
