"""Secret values are masked in every spelling an error text may use."""

from __future__ import annotations

import os

import pytest

from kora.mcp.redact import MASK, MissingEnvironmentVariable, RecordingEnviron, Redactor, looks_secret

pytestmark = pytest.mark.unit


def test_name_based_secrets_are_masked_without_being_read():
    redactor = Redactor({"OPENAI_API_KEY": "sk-abc123", "DB_PASSWORD": "hunter22", "CITY": "Paris"})
    assert redactor.redact("key sk-abc123, pw hunter22, city Paris") == f"key {MASK}, pw {MASK}, city Paris"


def test_values_a_tool_read_are_masked_in_plain_repr_json_and_url_forms():
    environ = {"UPSTREAM": "p@ss'wörd/1"}
    redactor = Redactor(environ)
    assert redactor.redact("p@ss'wörd/1") == "p@ss'wörd/1"  # not read yet, name is not secret-looking
    redactor.mark_read("UPSTREAM")
    for text in ("p@ss'wörd/1", repr("p@ss'wörd/1"), '"p@ss\'w\\u00f6rd/1"', "p%40ss%27w%C3%B6rd%2F1"):
        assert "ss" not in redactor.redact(text), text


def test_short_values_and_system_variables_are_left_alone():
    redactor = Redactor({"TOKEN": "abc", "HOME": "/root", "PATH": "/usr/bin"})
    redactor.mark_read("HOME")
    redactor.mark_read("PATH")
    assert redactor.redact("abc in /root with /usr/bin") == "abc in /root with /usr/bin"
    assert not looks_secret("PYTHONPATH")
    assert looks_secret("GITHUB_TOKEN")


def test_longer_secrets_are_masked_whole():
    redactor = Redactor({"A_TOKEN": "abcd", "B_TOKEN": "abcdefgh"})
    assert redactor.redact("abcdefgh") == MASK


def test_redact_json_walks_nested_values():
    redactor = Redactor({"API_KEY": "topsecret"})
    data = {"properties": {"key": {"default": "topsecret", "enum": ["x", "topsecret"]}}, "n": 1}
    assert redactor.redact_json(data) == {"properties": {"key": {"default": MASK, "enum": ["x", MASK]}}, "n": 1}


def test_recording_environ_marks_reads_and_explains_missing_variables():
    real = {"REGION_NAME": "eu-west-9"}
    redactor = Redactor(real)
    environ = RecordingEnviron(real, redactor)
    assert environ.get("REGION_NAME") == "eu-west-9"
    assert redactor.redact("in eu-west-9") == f"in {MASK}"
    with pytest.raises(KeyError) as caught:
        environ["NOPE_TOKEN"]
    assert isinstance(caught.value, MissingEnvironmentVariable)
    assert "environment variable 'NOPE_TOKEN' is not set" in str(caught.value)
    assert environ.get("NOPE_TOKEN", "default") == "default"
    environ["NEW"] = "value"
    assert real["NEW"] == "value"


def test_os_getenv_reads_through_the_recording_environ(monkeypatch):
    monkeypatch.setenv("UPSTREAM_URL_FOR_TEST", "https://user:pw@example.internal")
    redactor = Redactor(os.environ)
    monkeypatch.setattr(os, "environ", RecordingEnviron(os.environ, redactor))
    assert redactor.redact("https://user:pw@example.internal") != MASK
    assert os.getenv("UPSTREAM_URL_FOR_TEST") == "https://user:pw@example.internal"
    assert redactor.redact("GET https://user:pw@example.internal failed") == f"GET {MASK} failed"
