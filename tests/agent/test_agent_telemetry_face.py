"""The face of ``kora.agent.telemetry``: what the rest of the agent imports from it, pinned, so a name moved between
its modules stays importable from the package."""

import pytest

import kora.agent.telemetry as telemetry

pytestmark = pytest.mark.unit

FACE = {
    "PROVIDER",
    "SCOPE",
    "AgentTracing",
    "ModelRequests",
    "RequestRecord",
    "SessionTable",
    "StepSpans",
    "ToolMetrics",
    "TurnSpan",
    "TurnSteps",
    "observe_memory",
    "observe_sessions",
    "otel_input_messages",
    "otel_output_message",
    "record_approval_decided",
    "record_approvals_requested",
    "record_budget_exhausted",
    "record_delegation",
    "record_model_request",
    "record_tool_call",
    "record_turn_spend",
    "span_ids",
}


def test_the_face_exports_exactly_the_pinned_names():
    assert set(telemetry.__all__) == FACE
    for name in FACE:
        assert getattr(telemetry, name) is not None, name


def test_each_name_of_the_face_is_defined_in_one_module_of_the_package():
    for name in FACE:
        value = getattr(telemetry, name)
        module = getattr(value, "__module__", None)
        if module is not None and callable(value):
            assert module.startswith("kora.agent.telemetry."), (name, module)
