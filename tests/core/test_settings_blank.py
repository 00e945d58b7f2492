"""Every workload's settings read the environment by one rule (docs/configuration.md): a variable that is set but
empty or blank counts as not set, and settings loaded from an explicit mapping are that mapping's alone."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from kora.agent.settings import AgentSettings, load_agent_settings
from kora.console.settings import ConsoleSettings, load_console_settings
from kora.core.settings_errors import SettingsError
from kora.hosted.settings import ENV_PREFIX as HOSTED_PREFIX
from kora.hosted.settings import HostedSettings, load_hosted_settings
from kora.mcp.settings import McpSettings, load_mcp_settings
from kora.memory_service.settings import ENV_PREFIX as MEMORY_PREFIX
from kora.memory_service.settings import MemoryServiceSettings, load_memory_service_settings
from kora.operator.settings import OperatorSettings, load_operator_settings
from kora.proxy.model_proxy import ENV_PREFIX as PROXY_PREFIX
from kora.proxy.model_proxy import ProxySettings, load_proxy_settings

pytestmark = pytest.mark.unit

Loader = Callable[[Mapping[str, str] | None], BaseModel]

#: Each workload: its settings model, the prefix of its variables, its loader and the least it needs to start.
WORKLOADS: dict[str, tuple[type[BaseModel], str, Loader, dict[str, str]]] = {
    "agent": (
        AgentSettings,
        "",
        load_agent_settings,
        {"AGENT_NAME": "a", "MODEL_API_URL": "http://127.0.0.1:9/v1", "MODEL_NAME": "m"},
    ),
    "mcp": (McpSettings, "", load_mcp_settings, {"MCP_TOOLS_STRING": "def f() -> int:\n    return 1\n"}),
    "memory": (MemoryServiceSettings, MEMORY_PREFIX, load_memory_service_settings, {}),
    "operator": (OperatorSettings, "", load_operator_settings, {"KORA_IMAGE": "kora:dev"}),
    "console": (ConsoleSettings, "", load_console_settings, {}),
    "hosted": (HostedSettings, HOSTED_PREFIX, load_hosted_settings, {HOSTED_PREFIX + "MODEL": "m"}),
    "proxy": (ProxySettings, PROXY_PREFIX, load_proxy_settings, {PROXY_PREFIX + "API_BASE": "http://127.0.0.1:9/v1"}),
}

#: Every variable a workload reads, as (workload, variable).
VARIABLES = sorted(
    (workload, (prefix + field).upper())
    for workload, (model, prefix, _, _) in WORKLOADS.items()
    for field in model.model_fields
)
BLANK = st.text(alphabet=" \t\r\n\f\v", max_size=4)


def process_environment(workload: str, settings_env: Mapping[str, str]) -> dict[str, str]:
    """This process's environment with none of the variables of ``workload`` but those of ``settings_env``."""
    model, prefix, _, _ = WORKLOADS[workload]
    ours = {(prefix + field).upper() for field in model.model_fields}
    return {key: value for key, value in os.environ.items() if key.upper() not in ours} | dict(settings_env)


def outcome(load: Loader, environ: Mapping[str, str] | None) -> BaseModel | str:
    """The settings ``load`` makes of ``environ``, or the message of the error it raises."""
    try:
        return load(environ)
    except SettingsError as error:
        return str(error)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(VARIABLES), BLANK)
def test_a_blank_variable_counts_as_unset_in_every_workload(chosen: tuple[str, str], blank: str) -> None:
    workload, variable = chosen
    _, _, load, needed = WORKLOADS[workload]
    others = {key: value for key, value in needed.items() if key != variable}
    unset = outcome(load, others)  # a needed variable blank is "required but not set"
    # The process environment, as a workload started with `VARIABLE=` (or a manifest's `value: ""`) has it.
    with patch.dict(os.environ, process_environment(workload, others | {variable: blank}), clear=True):
        assert outcome(load, None) == unset
        # An explicit mapping is read alone: the blank in the process environment does not come back either.
        assert outcome(load, others) == unset


@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_settings_from_an_explicit_mapping_ignore_the_process_environment(workload: str) -> None:
    # A value that is valid (so only a mixed-in process environment could change the settings): "1" for every
    # variable but the ones the workload needs, which keep their values.
    model, prefix, load, needed = WORKLOADS[workload]
    unset = load(needed)
    others = {(prefix + field).upper(): "1" for field in model.model_fields} | needed
    with patch.dict(os.environ, process_environment(workload, others), clear=True):
        assert load(needed) == unset
