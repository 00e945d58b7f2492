"""``kora model-proxy``'s settings, loaded like every workload's (``MODEL_PROXY_*``): each bad variable named at
once, the backend URL kept without a trailing slash, the model list split on commas."""

from __future__ import annotations

import pytest

from kora.core.settings_errors import SettingsError
from kora.proxy.model_proxy import load_proxy_settings

pytestmark = pytest.mark.unit


def test_the_settings_of_a_proxy_in_front_of_a_backend():
    settings = load_proxy_settings(
        {
            "MODEL_PROXY_API_BASE": " https://api.openai.com/v1/ ",
            "MODEL_PROXY_API_KEY": "sk-backend",
            "MODEL_PROXY_MODELS": "gpt-5, ,gpt-5-mini",
            "MODEL_PROXY_MAX_REQUEST_BYTES": "2048",
            "AGENT_NAME": "not mine",
        }
    )
    assert settings.api_base == "https://api.openai.com/v1"
    assert settings.api_key == "sk-backend"
    assert settings.model_names == ("gpt-5", "gpt-5-mini")
    assert settings.max_request_bytes == 2048


def test_blank_values_are_unset():
    settings = load_proxy_settings({"MODEL_PROXY_API_BASE": "http://ollama:11434/v1", "MODEL_PROXY_API_KEY": " "})
    assert (settings.api_key, settings.model_names) == (None, ())


def test_every_bad_variable_is_named_at_once():
    with pytest.raises(SettingsError) as caught:
        load_proxy_settings({"MODEL_PROXY_API_BASE": "ftp://backend", "MODEL_PROXY_MAX_REQUEST_BYTES": "10"})
    assert caught.value.component == "kora model-proxy"
    assert [problem.split(":")[0] for problem in caught.value.problems] == [
        "MODEL_PROXY_API_BASE",
        "MODEL_PROXY_MAX_REQUEST_BYTES",
    ]
    assert "must be an http(s) URL" in caught.value.problems[0]


def test_a_missing_backend_is_named():
    with pytest.raises(SettingsError) as caught:
        load_proxy_settings({})
    assert caught.value.problems == ["MODEL_PROXY_API_BASE: required but not set"]
