"""Operator settings from the chart's environment (gateway, strict gateway-only traffic, route timeouts): defaults,
every variable, every bad value named at once, the URL strategies."""

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kora.core import env as names
from kora.core.settings_errors import SettingsError
from kora.operator.settings import (
    DEFAULT_GATEWAY_NAME,
    VARIABLES,
    OperatorSettings,
    load_operator_settings,
)
from kora.resources.graph import ResourceRef
from kora.resources.urls import ClusterDNS, GatewayRouted
from kora.resources.wiring import RouteTimeouts

pytestmark = pytest.mark.unit

IMAGE = {"KORA_IMAGE": "registry.example/kora:0.1.0"}
NO_FILE = Path("/nonexistent/serviceaccount/namespace")
AGENT = ResourceRef("Agent", "team", "helper")


def load(env: dict[str, str], namespace_file: Path = NO_FILE) -> OperatorSettings:
    return load_operator_settings(env, namespace_file=namespace_file)


def problems(env: dict[str, str]) -> list[str]:
    with pytest.raises(SettingsError) as caught:
        load(env)
    assert caught.value.component == "kora operator"
    return caught.value.problems


def test_defaults_outside_a_cluster():
    s = load(IMAGE)
    assert s.kora_image == "registry.example/kora:0.1.0"
    assert s.kora_image_pull_policy is None
    assert (s.operator_namespace, s.gateway_namespace, s.gateway_name) == ("default", "default", "kora-gateway")
    assert DEFAULT_GATEWAY_NAME == "kora-gateway"
    assert (s.gateway_api_enabled, s.strict_gateway_api_enabled, s.network_policy_enabled) == (False, False, False)
    assert (s.gateway_create, s.gateway_class_name, s.gateway_listener_port) == (False, "", 80)
    assert s.gateway_internal_url == ""
    assert s.route_timeouts == RouteTimeouts(agent=120.0, model_api=120.0, mcp=30.0, memory_store=30.0)
    assert s.network_policies is False


def test_namespace_comes_from_the_service_account_file(tmp_path):
    file = tmp_path / "namespace"
    file.write_text("kora-system\n")
    s = load(IMAGE, namespace_file=file)
    assert (s.operator_namespace, s.gateway_namespace) == ("kora-system", "kora-system")
    # The variable wins over the file; the Gateway's namespace follows the operator's unless given.
    s = load(IMAGE | {"OPERATOR_NAMESPACE": "ops"}, namespace_file=file)
    assert (s.operator_namespace, s.gateway_namespace) == ("ops", "ops")
    s = load(IMAGE | {"GATEWAY_NAMESPACE": "gateways"}, namespace_file=file)
    assert (s.operator_namespace, s.gateway_namespace) == ("kora-system", "gateways")
    # An empty file counts as absent.
    file.write_text("  \n")
    assert load(IMAGE, namespace_file=file).operator_namespace == "default"


def test_every_variable_is_read():
    s = load(
        {
            "KORA_IMAGE": "kora:1",
            "KORA_IMAGE_PULL_POLICY": "IfNotPresent",
            "OPERATOR_NAMESPACE": "ops",
            "GATEWAY_API_ENABLED": "true",
            "GATEWAY_NAME": "edge",
            "GATEWAY_NAMESPACE": "gateways",
            "GATEWAY_INTERNAL_URL": "http://edge.gateways.svc.cluster.local/",
            "GATEWAY_CREATE": "yes",
            "GATEWAY_CLASS_NAME": "envoy.example.com",
            "GATEWAY_LISTENER_PORT": "8080",
            "STRICT_GATEWAY_API_ENABLED": "1",
            "NETWORK_POLICY_ENABLED": "off",
            "GATEWAY_DEFAULT_AGENT_TIMEOUT": "5m",
            "GATEWAY_DEFAULT_MODELAPI_TIMEOUT": "1m30s",
            "GATEWAY_DEFAULT_MCP_TIMEOUT": "10s",
            "GATEWAY_DEFAULT_MEMORYSTORE_TIMEOUT": "500ms",
        }
    )
    assert s.kora_image == "kora:1"
    assert s.kora_image_pull_policy == "IfNotPresent"
    assert (s.operator_namespace, s.gateway_name, s.gateway_namespace) == ("ops", "edge", "gateways")
    assert s.gateway_internal_url == "http://edge.gateways.svc.cluster.local"  # trailing slash dropped
    assert (s.gateway_api_enabled, s.gateway_create, s.strict_gateway_api_enabled) == (True, True, True)
    assert s.network_policy_enabled is False
    assert s.network_policies is True  # strict mode overrides the disabling switch
    assert (s.gateway_class_name, s.gateway_listener_port) == ("envoy.example.com", 8080)
    assert s.route_timeouts == RouteTimeouts(agent=300.0, model_api=90.0, mcp=10.0, memory_store=0.5)


def test_names_are_case_insensitive_and_blanks_are_unset():
    s = load(
        {"kora_image": "kora:1", "Gateway_Api_Enabled": "TRUE", "GATEWAY_NAME": "  ", "NETWORK_POLICY_ENABLED": ""}
    )
    assert (s.kora_image, s.gateway_api_enabled, s.gateway_name, s.network_policy_enabled) == (
        "kora:1",
        True,
        "kora-gateway",
        False,
    )


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, ["KORA_IMAGE: required but not set"]),
        ({"KORA_IMAGE": "   "}, ["KORA_IMAGE: required but not set"]),
        (IMAGE | {"KORA_IMAGE": "kora: 1"}, ["KORA_IMAGE: "]),
        (IMAGE | {"KORA_IMAGE_PULL_POLICY": "sometimes"}, ["KORA_IMAGE_PULL_POLICY: "]),
        (IMAGE | {"GATEWAY_API_ENABLED": "maybe"}, ["GATEWAY_API_ENABLED: "]),
        (IMAGE | {"GATEWAY_NAME": "Edge_Gateway"}, ["GATEWAY_NAME: ", "DNS-1123"]),
        (IMAGE | {"GATEWAY_NAMESPACE": "-bad"}, ["GATEWAY_NAMESPACE: "]),
        (IMAGE | {"OPERATOR_NAMESPACE": "x" * 64}, ["OPERATOR_NAMESPACE: "]),
        (IMAGE | {"GATEWAY_LISTENER_PORT": "0"}, ["GATEWAY_LISTENER_PORT: "]),
        (IMAGE | {"GATEWAY_LISTENER_PORT": "http"}, ["GATEWAY_LISTENER_PORT: "]),
        (IMAGE | {"GATEWAY_INTERNAL_URL": "gateway:80"}, ["GATEWAY_INTERNAL_URL: ", "must be an http(s) URL"]),
        (IMAGE | {"GATEWAY_CLASS_NAME": "Envoy Gateway"}, ["GATEWAY_CLASS_NAME: "]),
        (IMAGE | {"GATEWAY_DEFAULT_MCP_TIMEOUT": "soon"}, ["GATEWAY_DEFAULT_MCP_TIMEOUT: ", "'soon'"]),
        (IMAGE | {"NETWORK_POLICY_ENABLED": "2"}, ["NETWORK_POLICY_ENABLED: "]),
        (
            IMAGE | {"STRICT_GATEWAY_API_ENABLED": "true"},
            ["STRICT_GATEWAY_API_ENABLED: needs GATEWAY_API_ENABLED=true", "GATEWAY_INTERNAL_URL: required with"],
        ),
        (
            IMAGE | {"STRICT_GATEWAY_API_ENABLED": "true", "GATEWAY_API_ENABLED": "true"},
            ["GATEWAY_INTERNAL_URL: required with STRICT_GATEWAY_API_ENABLED=true"],
        ),
        (
            IMAGE | {"GATEWAY_CREATE": "true"},
            ["GATEWAY_CREATE: needs GATEWAY_API_ENABLED=true", "GATEWAY_CLASS_NAME: required with GATEWAY_CREATE"],
        ),
    ],
)
def test_bad_settings_name_their_variable(env, expected):
    found = "\n".join(problems(env))
    for fragment in expected:
        assert fragment in found, found


def test_every_bad_variable_is_named_at_once():
    found = problems(
        {
            "GATEWAY_LISTENER_PORT": "99999",
            "GATEWAY_API_ENABLED": "perhaps",
            "GATEWAY_DEFAULT_AGENT_TIMEOUT": "2 minutes",
            "GATEWAY_DEFAULT_MODELAPI_TIMEOUT": "1d",
            "GATEWAY_CREATE": "true",
        }
    )
    named = {problem.split(":")[0] for problem in found}
    assert named == {
        "KORA_IMAGE",
        "GATEWAY_LISTENER_PORT",
        "GATEWAY_API_ENABLED",
        "GATEWAY_DEFAULT_AGENT_TIMEOUT",
        "GATEWAY_DEFAULT_MODELAPI_TIMEOUT",
        "GATEWAY_CREATE",
        "GATEWAY_CLASS_NAME",
    }
    message = str(SettingsError("kora operator", found))
    assert message.startswith("kora operator: invalid configuration (")


STRICT = IMAGE | {
    "GATEWAY_API_ENABLED": "true",
    "STRICT_GATEWAY_API_ENABLED": "true",
    "GATEWAY_INTERNAL_URL": "http://gw.gateways.svc",
}


@pytest.mark.parametrize(
    ("env", "workload_url", "public_url"),
    [
        (IMAGE, "http://agent-helper.team.svc.cluster.local:8000", "http://agent-helper.team.svc.cluster.local:8000"),
        # Gateway API without an internal URL: routes exist, but nobody in the cluster is told the gateway's address.
        (
            IMAGE | {"GATEWAY_API_ENABLED": "true"},
            "http://agent-helper.team.svc.cluster.local:8000",
            "http://agent-helper.team.svc.cluster.local:8000",
        ),
        (
            IMAGE | {"GATEWAY_API_ENABLED": "true", "GATEWAY_INTERNAL_URL": "http://gw.gateways.svc"},
            "http://agent-helper.team.svc.cluster.local:8000",
            "http://gw.gateways.svc/team/agent/helper",
        ),
        (STRICT, "http://gw.gateways.svc/team/agent/helper", "http://gw.gateways.svc/team/agent/helper"),
    ],
)
def test_url_strategies(env, workload_url, public_url):
    s = load(env)
    assert s.workload_strategy().url(AGENT) == workload_url
    assert s.public_strategy().url(AGENT) == public_url
    # Whatever the URLs, workloads listen on every interface at 8000 (the gateway's upstream is cluster DNS).
    assert s.workload_strategy().listen(AGENT) == ("0.0.0.0", 8000)
    assert s.workload_strategy().direct_url(AGENT) == "http://agent-helper.team.svc.cluster.local:8000"


def test_strategy_types():
    assert isinstance(load(IMAGE).workload_strategy(), ClusterDNS)
    assert isinstance(load(STRICT).workload_strategy(), GatewayRouted)


def test_every_setting_has_its_name_in_core_env():
    declared = {value for key, value in vars(names).items() if key.isupper() and isinstance(value, str)}
    fields = {name.upper() for name in OperatorSettings.model_fields} - {"ROUTE_TIMEOUTS"}
    assert fields <= declared, fields - declared
    assert {var.name for var in VARIABLES} == {
        names.GATEWAY_DEFAULT_AGENT_TIMEOUT,
        names.GATEWAY_DEFAULT_MODELAPI_TIMEOUT,
        names.GATEWAY_DEFAULT_MCP_TIMEOUT,
        names.GATEWAY_DEFAULT_MEMORYSTORE_TIMEOUT,
    }


_VARIABLE_NAMES = sorted({name.upper() for name in OperatorSettings.model_fields} - {"ROUTE_TIMEOUTS"}) + [
    var.name for var in VARIABLES
]
_HOSTILE = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=()), max_size=40) | st.sampled_from(
    ["\ud800", "\x00", "true\n", "8" * 30, "-1", "1e9", "http://", "${HOME}", "a" * 300]
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(_VARIABLE_NAMES), _HOSTILE, max_size=6))
def test_any_environment_loads_or_raises_settings_error(env):
    problems: list[str] = []
    result = None
    try:
        result = load(IMAGE | env)
    except SettingsError as error:
        problems = error.problems
    if result is None:
        assert problems
        for problem in problems:
            assert problem.split(":")[0].split(" ")[0] in _VARIABLE_NAMES, problem
        return
    assert result.operator_namespace
    assert result.gateway_namespace
    if result.strict_gateway_api_enabled:
        assert result.gateway_api_enabled
        assert result.gateway_internal_url
    if result.gateway_create:
        assert result.gateway_api_enabled
        assert result.gateway_class_name
