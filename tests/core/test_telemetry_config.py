"""Reading the OTEL_* variables (kora.core.telemetry.config): what is exported, over which protocol, and which
values stop start-up with a message naming the variable."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.sdk.resources import OTELResourceDetector, Resource

from kora.core.settings_errors import SettingsError
from kora.core.telemetry.config import (
    TelemetryConfig,
    content_capture_enabled,
    metrics_export_enabled,
    read_telemetry_config,
    resource_attributes_value,
    tracing_enabled,
)
from kora.core.telemetry.setup import _resource

pytestmark = pytest.mark.unit

ENDPOINT = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}


@pytest.mark.parametrize(
    ("env", "traces", "metrics"),
    [
        ({}, False, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "   "}, False, False),
        (ENDPOINT, True, True),
        ({**ENDPOINT, "OTEL_SDK_DISABLED": "TRUE"}, False, False),
        ({**ENDPOINT, "OTEL_SDK_DISABLED": "false"}, True, True),
        ({**ENDPOINT, "OTEL_SDK_DISABLED": "yes"}, True, True),  # the SDK's reading: only "true" disables
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, True, False),
        ({"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://c:4318/v1/metrics"}, False, True),
    ],
)
def test_what_is_exported(env, traces, metrics):
    assert tracing_enabled(env) is traces
    assert metrics_export_enabled(env) is metrics
    config = read_telemetry_config(env)
    assert (config.traces, config.metrics) == (traces, metrics)


@pytest.mark.parametrize(
    ("env", "traces_protocol", "metrics_protocol"),
    [
        (ENDPOINT, "http/protobuf", "http/protobuf"),
        ({**ENDPOINT, "OTEL_EXPORTER_OTLP_PROTOCOL": " GRPC "}, "grpc", "grpc"),
        ({**ENDPOINT, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/protobuf"},
         "grpc", "http/protobuf"),
        ({**ENDPOINT, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}, "grpc", "http/protobuf"),
        ({**ENDPOINT, "OTEL_EXPORTER_OTLP_PROTOCOL": ""}, "http/protobuf", "http/protobuf"),
    ],
)  # fmt: skip
def test_protocol_per_signal_over_the_shared_variable(env, traces_protocol, metrics_protocol):
    config = read_telemetry_config(env)
    assert (config.traces_protocol, config.metrics_protocol) == (traces_protocol, metrics_protocol)


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({**ENDPOINT, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "OTEL_EXPORTER_OTLP_PROTOCOL"),
        ({**ENDPOINT, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "udp"}, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, "OTEL_EXPORTER_OTLP_ENDPOINT"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "ftp://collector"}, "OTEL_EXPORTER_OTLP_ENDPOINT"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://"}, "OTEL_EXPORTER_OTLP_ENDPOINT"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:99999"}, "OTEL_EXPORTER_OTLP_ENDPOINT"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/a b"}, "OTEL_EXPORTER_OTLP_ENDPOINT"),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "nope"}, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
    ],
)
def test_bad_values_name_the_variable(env, variable):
    with pytest.raises(SettingsError) as raised:
        read_telemetry_config(env, "kora agent")
    assert raised.value.component == "kora agent"
    assert [problem.split(":")[0] for problem in raised.value.problems] == [variable]


def test_a_bad_shared_protocol_is_reported_once_and_unused_settings_are_not_checked():
    with pytest.raises(SettingsError) as raised:
        read_telemetry_config({**ENDPOINT, "OTEL_EXPORTER_OTLP_PROTOCOL": "x"})
    assert len(raised.value.problems) == 1
    # Nothing exported: a stray protocol does not stop a workload.
    assert read_telemetry_config({"OTEL_EXPORTER_OTLP_PROTOCOL": "x"}) == TelemetryConfig(traces=False, metrics=False)


@pytest.mark.parametrize(("value", "enabled"), [("true", True), (" TRUE ", True), ("1", False), ("", False)])
def test_content_capture_follows_the_conventions_variable(value, enabled):
    env = {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": value}
    assert content_capture_enabled(env) is enabled
    assert read_telemetry_config(env).capture_content is enabled


hostile_text = st.text(st.characters(codec="utf-8", exclude_categories=()), max_size=60) | st.sampled_from(
    ["\x00", "http://c:4318\r\nX: y", "grpc\x7f", "\ud800", "http://[::1", "http://c:-1", " " * 5]
)
VARIABLES = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
    "OTEL_SDK_DISABLED",
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
]


@given(st.dictionaries(st.sampled_from(VARIABLES), hostile_text, max_size=len(VARIABLES)))
def test_hostile_values_give_a_config_or_a_settings_error_naming_them(env):
    problems: list[str] = []
    try:
        config = read_telemetry_config(env)
    except SettingsError as error:
        problems = error.problems
        config = None
    if config is None:
        assert problems
        for problem in problems:
            assert problem.split(":")[0] in env
            assert "\n" not in problem  # repr() keeps a hostile value on its line
    else:
        assert config.traces == tracing_enabled(env)
        assert config.metrics == metrics_export_enabled(env)
        for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
            if config.traces and env.get(name, "").strip():
                assert env[name].strip().lower().startswith(("http://", "https://"))


names = st.text(st.characters(codec="utf-8", categories=("L", "N", "P", "S", "Zs")), min_size=1, max_size=30)


@given(namespace=names, kind=st.sampled_from(["Agent", "MCPServer", "ModelAPI", "MemoryStore"]), name=names)
def test_resource_attributes_survive_the_sdks_parser(namespace, kind, name):
    # The SDK splits on "," and "=" and strips before percent-decoding: the values come back whole.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OTEL_RESOURCE_ATTRIBUTES", resource_attributes_value(namespace, kind, name))
        attributes = OTELResourceDetector().detect().attributes
    assert attributes["service.namespace"] == namespace
    assert (attributes["kora.resource.kind"], attributes["kora.resource.name"]) == (kind, name)


@given(namespace=names, name=names)
def test_the_workloads_resource_is_equal_to_and_hashes_as_the_sdks_resource_of_its_attributes(namespace, name):
    # Its hash is worked out once (the span exporter hashes it per span); a plain Resource of the same attributes
    # must still find it in a dict, and the other way round.
    resource = _resource("Agent", name, namespace)
    plain = Resource(dict(resource.attributes), resource.schema_url)
    assert resource == plain
    assert plain == resource
    assert hash(resource) == hash(resource) == hash(plain)
    assert {plain: "found"}[resource] == {resource: "found"}[plain] == "found"
