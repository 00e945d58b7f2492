"""``kora memory``'s settings: defaults, and one start-up message naming every bad variable."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kora.core.settings_errors import SettingsError
from kora.memory_service.settings import load_memory_service_settings

pytestmark = pytest.mark.unit


def test_defaults_are_local_storage_without_models() -> None:
    settings = load_memory_service_settings({})
    assert settings.storage_mode == "local"
    assert str(settings.data_dir) == "data"
    assert not settings.has_summary_model
    assert not settings.has_embedding_model
    assert settings.max_read_scope == "user"


def test_every_bad_variable_is_named_at_once() -> None:
    with pytest.raises(SettingsError) as caught:
        load_memory_service_settings(
            {
                "MEMORY_SERVICE_STORAGE_MODE": "external",
                "MEMORY_SERVICE_SUMMARY_MODEL_API_URL": "ftp://nope",
                "MEMORY_SERVICE_EMBEDDING_MODEL": "minilm",
                "MEMORY_SERVICE_SCORE_THRESHOLD": "2",
                "MEMORY_SERVICE_MAX_READ_SCOPE": "store",
            }
        )
    message = str(caught.value)
    for variable in (
        "MEMORY_SERVICE_DATABASE_URL: required with MEMORY_SERVICE_STORAGE_MODE=external",
        "MEMORY_SERVICE_SUMMARY_MODEL_API_URL: Value error, must be an http(s) URL",
        "MEMORY_SERVICE_EMBEDDING_MODEL_API_URL and MEMORY_SERVICE_EMBEDDING_MODEL: set both or neither",
        "MEMORY_SERVICE_SCORE_THRESHOLD",
        "MEMORY_SERVICE_MAX_READ_SCOPE",
    ):
        assert variable in message


def test_kora_memory_exits_2_naming_the_problem() -> None:
    env = {"MEMORY_SERVICE_STORAGE_MODE": "external", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-m", "kora.cli", "memory", "--port", "1"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 2
    assert "MEMORY_SERVICE_DATABASE_URL: required" in done.stderr
    assert "Traceback" not in done.stderr
    done = subprocess.run([sys.executable, "-m", "kora.cli", "memory", "--port", "0"], capture_output=True, text=True)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
