"""``CONSOLE_TRACE_URL``, the console's link from a trace id to a trace viewer: a template holding ``{trace_id}``,
an http(s) URL, checked at start-up (``kora console`` names the setting; ``kora up --trace-url`` the flag) and
filled with each trace id the console shows."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kora.cli import main
from kora.console.settings import load_console_settings
from kora.core.settings_errors import SettingsError
from kora.core.trace_links import fill_trace_url
from kora.local.up import CONSOLE_REF, console_plan

pytestmark = pytest.mark.unit

JAEGER = "http://localhost:16686/trace/{trace_id}"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


def test_unset_the_console_links_no_trace():
    assert load_console_settings({}).console_trace_url is None
    assert load_console_settings({"CONSOLE_TRACE_URL": "  "}).console_trace_url is None


@pytest.mark.parametrize("template", [JAEGER, "https://grafana.example/explore?trace={trace_id}&org=1"])
def test_an_http_template_holding_the_trace_id_is_taken_and_filled(template: str):
    assert load_console_settings({"CONSOLE_TRACE_URL": template}).console_trace_url == template
    assert fill_trace_url(template, TRACE_ID) == template.replace("{trace_id}", TRACE_ID)


@pytest.mark.parametrize(
    ("template", "problem"),
    [
        ("http://localhost:16686/trace/", "must hold {trace_id} where the trace id goes"),
        ("http://localhost:16686/trace/{traceId}", "must hold {trace_id} where the trace id goes"),
        ("ftp://traces.example/{trace_id}", "must be an http:// or https:// URL with a host"),
        ("javascript:alert('{trace_id}')", "must be an http:// or https:// URL with a host"),
        ("localhost:16686/trace/{trace_id}", "must be an http:// or https:// URL with a host"),
        ("http:///trace/{trace_id}", "must be an http:// or https:// URL with a host"),
    ],
)
def test_any_other_value_is_a_startup_error_naming_the_setting(template: str, problem: str):
    with pytest.raises(SettingsError) as caught:
        load_console_settings({"CONSOLE_TRACE_URL": template})
    message = str(caught.value)
    assert "kora console" in message
    assert "CONSOLE_TRACE_URL" in message
    assert problem in message


def test_kora_console_refuses_it_with_exit_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    monkeypatch.setenv("CONSOLE_TRACE_URL", "http://localhost:16686/trace")
    assert main(["console"]) == 2
    err = capsys.readouterr().err
    assert "CONSOLE_TRACE_URL" in err
    assert "Traceback" not in err


def test_kora_up_refuses_a_bad_trace_url_before_anything_starts(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    state_dir = tmp_path / ".kora"
    argv = ["up", "examples/quickstart", "--port", "0", "--state-dir", str(state_dir), "--trace-url", "ftp://x/y"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "kora up: --trace-url (CONSOLE_TRACE_URL): must hold {trace_id}" in err
    assert not (state_dir / "state.json").exists(), "nothing started"


def test_kora_up_hands_the_trace_url_to_the_console_only_when_given(tmp_path: Path):
    given_env = {e.name: e.value for e in console_plan(tmp_path, "http://127.0.0.1:8080", JAEGER).env}
    assert given_env["CONSOLE_TRACE_URL"] == JAEGER
    plain = console_plan(tmp_path, "http://127.0.0.1:8080")
    assert plain.ref == CONSOLE_REF
    assert "CONSOLE_TRACE_URL" not in {e.name for e in plain.env}


@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=40))
def test_a_trace_id_is_percent_encoded_into_the_path(trace_id: str):
    filled = fill_trace_url(JAEGER, trace_id)
    assert filled.startswith("http://localhost:16686/trace/")
    assert "/" not in filled.removeprefix("http://localhost:16686/trace/")
