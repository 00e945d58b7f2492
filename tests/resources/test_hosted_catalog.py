"""Which models Hosted mode serves, and the messages for the ones it cannot serve here."""

from __future__ import annotations

from importlib.machinery import ModuleSpec
from pathlib import Path

import pytest

from kora.resources.hosted_models import (
    MINILM,
    find_hosted_model,
    hosted_problem,
    install_command,
    missing_extra_message,
    model_path_problem,
    resolve_hosted_model,
    unsupported_message,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "name",
    [
        "all-MiniLM-L6-v2",
        "sentence-transformers/all-MiniLM-L6-v2",
        " all-minilm-l6-v2 ",
        "SENTENCE-TRANSFORMERS/ALL-MINILM-L6-V2",
    ],
)
def test_minilm_answers_to_both_spellings_in_any_case(name: str):
    assert find_hosted_model(name) is MINILM
    assert MINILM.answers_to(name)


@pytest.mark.parametrize("name", ["llama3", "all-MiniLM-L12-v2", "minilm", "text-embedding-3-small", ""])
def test_other_models_are_not_hosted(name: str):
    assert find_hosted_model(name) is None
    assert hosted_problem(name) == unsupported_message(name)


def test_minilm_facts():
    assert MINILM.name == "sentence-transformers/all-MiniLM-L6-v2"
    assert MINILM.short_name == "all-MiniLM-L6-v2"
    assert MINILM.dimensions == 384
    assert install_command(MINILM) == "pip install 'kora[embeddings]'"


def test_unsupported_message_names_the_model_and_the_alternatives():
    message = unsupported_message("llama3")
    assert "Hosted is not supported for model 'llama3'" in message
    assert "all-MiniLM-L6-v2" in message
    assert "mode: Proxy" in message
    assert "mode: Scripted" in message


def test_missing_extra_names_the_missing_modules_and_the_pip_command():
    def only_torchless(name: str) -> ModuleSpec | None:
        return None if name == "sentence_transformers" else ModuleSpec(name, None)

    message = missing_extra_message(MINILM, only_torchless)
    assert message is not None
    assert "missing: sentence_transformers)" in message
    assert "pip install 'kora[embeddings]'" in message
    assert "pip install -c constraints.txt -e '.[embeddings]'" in message


def test_nothing_is_missing_when_every_module_is_found():
    assert missing_extra_message(MINILM, lambda name: ModuleSpec(name, None)) is None


def test_the_packaged_model_needs_no_path_and_another_name_needs_one():
    assert resolve_hosted_model("all-MiniLM-L6-v2", None) is MINILM
    assert resolve_hosted_model("all-MiniLM-L6-v2", "") is MINILM
    refused = resolve_hosted_model("BAAI/bge-small-en-v1.5", None)
    assert refused == unsupported_message("BAAI/bge-small-en-v1.5")
    assert "set hostedConfig.modelPath (MODEL_HOSTED_MODEL_PATH) to a directory" in str(refused)


def test_a_named_model_with_a_path_is_served_under_that_exact_name_only():
    model = resolve_hosted_model(" BAAI/bge-small-en-v1.5 ", "/models/bge")
    assert not isinstance(model, str)
    assert (model.name, model.path, model.dimensions) == ("BAAI/bge-small-en-v1.5", Path("/models/bge"), None)
    assert model.answers_to("baai/bge-small-en-v1.5")
    assert not model.answers_to("bge-small-en-v1.5")
    assert model.extra == "embeddings"


def test_a_model_path_must_be_an_absolute_directory_holding_a_model(tmp_path: Path):
    setting = "hostedConfig.modelPath (MODEL_HOSTED_MODEL_PATH)"
    assert model_path_problem("models/bge") == f"{setting} 'models/bge' must be an absolute path"
    missing = str(tmp_path / "missing")
    assert model_path_problem(missing) == f"{setting} {missing!r} is not a directory here"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert model_path_problem(str(empty)) == (
        f"{setting} {str(empty)!r} holds no sentence-transformers model (neither modules.json nor config.json)"
    )
    assert hosted_problem("BAAI/bge-small-en-v1.5", str(empty)) == model_path_problem(str(empty))
    (empty / "modules.json").write_text("[]")
    assert model_path_problem(str(empty)) is None
