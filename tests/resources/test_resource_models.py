"""Resource models: wire names, defaults, enums and cross-field rules of the four kinds
(docs/resources.md)."""

from typing import get_args

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from kora.agent.settings import ReadScope as AgentReadScope
from kora.resources.models import (
    API_VERSION,
    MAX_DURATION_SECONDS,
    Agent,
    MCPServer,
    MemoryStore,
    ModelAPI,
    ModelAPIMode,
    Phase,
    ReadScope,
    format_duration,
    parse_duration,
)

pytestmark = pytest.mark.unit


def agent(spec: dict | None = None, **metadata) -> dict:
    return {
        "apiVersion": API_VERSION,
        "kind": "Agent",
        "metadata": {"name": "helper", **metadata},
        "spec": {"modelAPI": "llm", "model": "gpt", **(spec or {})},
    }


def errors(model, data) -> list[tuple[str, str]]:
    with pytest.raises(ValidationError) as info:
        model.model_validate(data)
    return [(".".join(str(p) for p in e["loc"]), e["msg"]) for e in info.value.errors()]


def test_agent_defaults_follow_the_spec():
    a = Agent.model_validate(agent())
    assert a.metadata.namespace == "default"
    assert a.spec.wait_for_dependencies is True
    assert a.spec.replicas == 1
    loop = a.spec.config.agentic_loop
    assert (loop.enable_tools, loop.enable_delegation, loop.max_steps) == (True, True, 5)
    memory = a.spec.config.memory
    assert (memory.enabled, memory.type, memory.context_limit, memory.max_sessions, memory.max_session_events) == (
        True,
        "local",
        6,
        1000,
        500,
    )
    assert memory.max_read_scope == "session"
    assert a.spec.config.task_store_type == "local"
    assert a.status is None


def test_wire_names_are_camel_case_and_round_trip():
    data = agent(
        {
            "mcpServers": ["tools"],
            "agentNetwork": {"access": ["peer"], "expose": False},
            "gatewayRoute": {"timeout": "90s"},
            "waitForDependencies": False,
            "config": {
                "agenticLoop": {"enableTools": False, "maxSteps": 3},
                "memory": {"type": "remote", "memoryStore": "mem", "maxReadScope": "user", "failureMode": "strict"},
                "taskStoreType": "null",
                "env": [{"name": "LOG", "value": "1"}],
            },
        }
    )
    a = Agent.model_validate(data)
    assert a.spec.model_api == "llm"
    assert a.spec.config.memory.memory_store == "mem"
    dumped = a.model_dump(exclude_none=True)
    assert dumped["spec"]["modelAPI"] == "llm"
    assert dumped["spec"]["config"]["memory"]["maxReadScope"] == "user"
    assert Agent.model_validate(dumped) == a


def test_kaos_api_version_is_accepted_and_normalised():
    a = Agent.model_validate({**agent(), "apiVersion": "kaos.tools/v1alpha1"})
    assert a.api_version == API_VERSION


def test_read_scopes_match_the_agent_settings():
    assert get_args(ReadScope) == get_args(AgentReadScope) == ("session", "agent", "user")


@pytest.mark.parametrize(
    ("data", "where", "fragment"),
    [
        (agent(name="Bad_Name"), "metadata.name", "DNS-1123"),
        (agent(name="a" * 64), "metadata.name", "DNS-1123"),
        (agent(namespace="NS"), "metadata.namespace", "DNS-1123"),
        (agent({"modelApi": "x"}), "spec.modelApi", "Extra inputs"),
        (agent({"gatewayRoute": {"timeout": "30 seconds"}}), "spec.gatewayRoute.timeout", "duration"),
        (agent({"config": {"memory": {"type": "remote"}}}), "spec.config.memory", "memoryStore"),
        (agent({"config": {"memory": {"memoryStore": "m"}}}), "spec.config.memory", "only with type 'remote'"),
        (agent({"config": {"memory": {"maxReadScope": "user"}}}), "spec.config.memory", "needs type 'remote'"),
        (agent({"config": {"memory": {"maxReadScope": "agent"}}}), "spec.config.memory", "needs type 'remote'"),
        (
            agent({"config": {"memory": {"type": "remote", "memoryStore": "m", "maxReadScope": "store"}}}),
            "spec.config.memory.maxReadScope",
            "'session', 'agent' or 'user'",
        ),
        (agent({"config": {"memory": {"tools": "everything"}}}), "spec.config.memory.tools", "'all'"),
        (agent({"config": {"memory": {"failureMode": "hard"}}}), "spec.config.memory.failureMode", "'soft'"),
        (agent({"config": {"taskStoreType": "redis"}}), "spec.config.taskStoreType", "'local'"),
        (agent({"config": {"taskStoreType": "postgres"}}), "spec.config", "TASK_STORE_URL"),
        (agent({"config": {"agenticLoop": {"maxSteps": 0}}}), "spec.config.agenticLoop.maxSteps", "greater"),
        (agent({"instructions": "a", "config": {"instructions": "b"}}), "spec", "once"),
        (agent({"mcpServers": ["t", "t"]}), "spec", "more than once"),
        (agent({"config": {"env": [{"name": "MODEL_NAME", "value": "x"}]}}), "spec", "MODEL_NAME"),
        (agent({"config": {"env": [{"name": "MCP_SERVER_X_URL", "value": "x"}]}}), "spec", "MCP_SERVER_X_URL"),
        (agent({"config": {"env": [{"name": "X"}]}}), "spec.config.env.0", "exactly one"),
        (
            agent(
                {
                    "config": {
                        "env": [{"name": "X", "value": "1", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]
                    }
                }
            ),
            "spec.config.env.0",
            "exactly one",
        ),
        (agent({"config": {"env": [{"name": "1X", "value": "1"}]}}), "spec.config.env.0.name", "variable name"),
        (agent({"replicas": -1}), "spec.replicas", "greater"),
        ({**agent(), "apiVersion": "example.com/v1"}, "apiVersion", "kora.dev/v1alpha1"),
        (agent(name="x" * 60), "", "at most 57"),
    ],
)
def test_agent_rejects(data, where, fragment):
    found = errors(Agent, data)
    assert any(loc == where and fragment in msg for loc, msg in found), found


def test_user_env_may_set_otel_endpoint_only_without_telemetry():
    env = {"config": {"env": [{"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://otel:4318"}]}}
    Agent.model_validate(agent(env))
    with_telemetry = {**env, "telemetry": {"endpoint": "http://otel:4318"}}
    assert any("OTEL_EXPORTER_OTLP_ENDPOINT" in msg for _, msg in errors(Agent, agent(with_telemetry)))


def model_api(spec: dict) -> dict:
    return {"apiVersion": API_VERSION, "kind": "ModelAPI", "metadata": {"name": "llm"}, "spec": spec}


@pytest.mark.parametrize(
    ("spec", "mode"),
    [
        ({"mode": "Proxy", "proxyConfig": {"apiBase": "http://ollama:11434/v1"}}, ModelAPIMode.PROXY),
        (
            {
                "mode": "Proxy",
                "proxyConfig": {
                    "apiBase": "https://api.openai.com/v1/",
                    "apiKey": {"valueFrom": {"secretKeyRef": {"name": "openai", "key": "key"}}},
                    "models": ["gpt-4o"],
                },
            },
            ModelAPIMode.PROXY,
        ),
        ({"mode": "Hosted", "hostedConfig": {"model": "smollm2:135m"}}, ModelAPIMode.HOSTED),
        ({"mode": "Scripted"}, ModelAPIMode.SCRIPTED),
        ({"mode": "Scripted", "scriptedConfig": {"script": [{"reply": "hi"}]}}, ModelAPIMode.SCRIPTED),
        ({"mode": "Scripted", "scriptedConfig": {"scriptFile": "rules.yaml"}}, ModelAPIMode.SCRIPTED),
    ],
)
def test_model_api_modes(spec, mode):
    m = ModelAPI.model_validate(model_api(spec))
    assert m.spec.mode is mode
    if m.spec.proxy_config is not None:
        assert not m.spec.proxy_config.api_base.endswith("/")


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ({"mode": "Proxy"}, "needs 'proxyConfig'"),
        ({"mode": "Hosted"}, "needs 'hostedConfig'"),
        ({"mode": "Hosted", "hostedConfig": {"model": "m"}, "proxyConfig": {"apiBase": "http://x"}}, "does not use"),
        ({"mode": "Scripted", "scriptedConfig": {"script": [], "scriptFile": "f"}}, "not both"),
        ({"mode": "Proxy", "proxyConfig": {"apiBase": "ollama:11434"}}, "http(s) URL"),
        ({"mode": "Proxy", "proxyConfig": {"apiBase": "http://x", "apiKey": {}}}, "exactly one"),
        ({"mode": "Local"}, "'Proxy'"),
    ],
)
def test_model_api_rejects(spec, fragment):
    assert any(fragment in msg for _, msg in errors(ModelAPI, model_api(spec)))


def mcp(spec: dict) -> dict:
    return {"apiVersion": API_VERSION, "kind": "MCPServer", "metadata": {"name": "tools"}, "spec": spec}


TOOLS = "def add(a: int, b: int) -> int:\n    '''Add.'''\n    return a + b\n"


@pytest.mark.parametrize(
    "spec",
    [
        {"type": "python-runtime", "config": {"toolsString": TOOLS}},
        {"config": {"toolsString": TOOLS}},
        {"type": "python-package", "config": {"mcp": "mcp-server-fetch"}},
        {
            "config": {
                "toolsString": TOOLS,
                "env": [
                    {"name": "API_URL", "value": "http://x"},
                    {"name": "API_KEY", "valueFrom": {"secretKeyRef": {"name": "keys", "key": "api"}}},
                ],
            }
        },
    ],
)
def test_mcp_server_accepts(spec):
    MCPServer.model_validate(mcp(spec))


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ({"type": "python-runtime"}, "needs 'config.toolsString'"),
        ({"type": "python-package"}, "needs 'config.mcp'"),
        ({"type": "python-package", "config": {"mcp": "pkg", "toolsString": TOOLS}}, "does not use"),
        ({"type": "python-runtime", "config": {"mcp": "pkg", "toolsString": TOOLS}}, "does not use"),
        ({"type": "python-package", "config": {"mcp": "pkg; rm -rf"}}, "not a package name"),
        ({"config": {"toolsString": "def broken(:\n"}}, "not valid Python"),
        ({"config": {"toolsString": TOOLS, "env": [{"name": "MCP_TOOLS_STRING", "value": "x"}]}}, "MCP_TOOLS_STRING"),
        ({"type": "nodejs", "config": {"toolsString": TOOLS}}, "python-runtime"),
        ({"config": {"toolsString": TOOLS, "tools": []}}, "Extra inputs"),
    ],
)
def test_mcp_server_rejects(spec, fragment):
    assert any(fragment in msg for _, msg in errors(MCPServer, mcp(spec)))


def store(spec: dict) -> dict:
    return {"apiVersion": API_VERSION, "kind": "MemoryStore", "metadata": {"name": "mem"}, "spec": spec}


def test_memory_store_defaults_follow_the_contract():
    s = MemoryStore.model_validate(store({})).spec
    assert (s.storage.type, s.storage.external) == ("local", None)
    assert (s.models.summarization, s.models.embedding) == (None, None)
    assert (s.short_term.token_budget, s.short_term.hard_event_cap) == (2000, 50)
    medium = s.medium_term
    assert (medium.enabled, medium.compaction_trigger, medium.compaction_target, medium.digest_retention) == (
        True,
        20,
        400,
        5,
    )
    assert (s.long_term.enabled, s.long_term.default_top_k, s.long_term.score_threshold) == (True, 5, 0.2)
    assert s.max_read_scope == "user"


KAOS_STORE = {
    "apiVersion": "kaos.tools/v1alpha1",
    "kind": "MemoryStore",
    "metadata": {"name": "mem", "namespace": "team"},
    "spec": {
        "storage": {"type": "external", "external": {"connectionSecretRef": {"name": "pg", "key": "dsn"}}},
        "models": {
            "summarization": {"modelAPI": "llm", "model": "small"},
            "embedding": {"modelAPI": "embedder", "model": "nomic-embed-text"},
        },
        "shortTerm": {"tokenBudget": 3000, "hardEventCap": 80},
        "mediumTerm": {"enabled": False, "compactionTrigger": 10, "compactionTarget": 300, "digestRetention": 2},
        "longTerm": {"enabled": True, "defaultTopK": 8, "scoreThreshold": 0.5},
        "maxReadScope": "agent",
    },
}


def test_kaos_memory_store_manifest_carries_over_and_round_trips():
    s = MemoryStore.model_validate(KAOS_STORE)
    spec = s.spec
    assert s.api_version == API_VERSION
    assert spec.storage.type == "external"
    assert spec.storage.external is not None
    assert spec.storage.external.connection_secret_ref.key == "dsn"
    assert spec.models.embedding is not None
    assert spec.models.embedding.model_api == "embedder"
    assert (spec.short_term.token_budget, spec.medium_term.enabled, spec.long_term.default_top_k) == (3000, False, 8)
    assert (spec.long_term.score_threshold, spec.max_read_scope) == (0.5, "agent")
    dumped = s.model_dump(exclude_none=True)
    assert dumped["spec"]["shortTerm"] == {"tokenBudget": 3000, "hardEventCap": 80}
    assert dumped["spec"]["models"]["summarization"] == {"modelAPI": "llm", "model": "small"}
    assert "mode" not in dumped["spec"]["storage"]
    assert MemoryStore.model_validate(dumped) == s


@pytest.mark.parametrize("mode", ["local", "external"])
def test_storage_mode_is_a_deprecated_name_of_type(mode):
    external = {"external": {"connectionSecretRef": {"name": "pg", "key": "url"}}} if mode == "external" else {}
    storage = MemoryStore.model_validate(store({"storage": {"mode": mode, **external}})).spec.storage
    assert (storage.type, storage.mode) == (mode, None)
    same = MemoryStore.model_validate(store({"storage": {"mode": mode, "type": mode, **external}})).spec.storage
    assert same == storage


@pytest.mark.parametrize(
    ("spec", "where", "fragment"),
    [
        ({"storage": {"type": "external"}}, "spec.storage", "connectionSecretRef"),
        (
            {"storage": {"external": {"connectionSecretRef": {"name": "pg", "key": "url"}}}},
            "spec.storage",
            "only with type",
        ),
        ({"storage": {"type": "s3"}}, "spec.storage.type", "'local'"),
        ({"storage": {"type": "local", "mode": "external"}}, "spec.storage", "disagree"),
        ({"models": {"embedding": {"model": "x"}}}, "spec.models.embedding.modelAPI", "Field required"),
        ({"embedding": {"modelAPI": "llm"}}, "spec.embedding", "Extra inputs"),  # moved under `models`
        ({"shortTerm": {"tokenBudget": 0}}, "spec.shortTerm.tokenBudget", "greater than or equal to 1"),
        ({"shortTerm": {"hardEventCap": 0}}, "spec.shortTerm.hardEventCap", "greater than or equal to 1"),
        ({"mediumTerm": {"compactionTrigger": 0}}, "spec.mediumTerm.compactionTrigger", "greater than or equal"),
        ({"mediumTerm": {"compactionTarget": 0}}, "spec.mediumTerm.compactionTarget", "greater than or equal"),
        ({"mediumTerm": {"digestRetention": 0}}, "spec.mediumTerm.digestRetention", "greater than or equal"),
        ({"longTerm": {"defaultTopK": 0}}, "spec.longTerm.defaultTopK", "greater than or equal"),
        ({"longTerm": {"scoreThreshold": 1.5}}, "spec.longTerm.scoreThreshold", "less than or equal to 1"),
        ({"longTerm": {"scoreThreshold": -0.1}}, "spec.longTerm.scoreThreshold", "greater than or equal to 0"),
        ({"maxReadScope": "store"}, "spec.maxReadScope", "'session', 'agent' or 'user'"),
    ],
)
def test_memory_store_rejects(spec, where, fragment):
    assert any(loc == where and fragment in msg for loc, msg in errors(MemoryStore, store(spec)))


def test_agent_memory_client_token_budget():
    remote = {"type": "remote", "memoryStore": "mem"}
    assert Agent.model_validate(agent()).spec.config.memory.client_params.token_budget == 2000
    params = {"clientParams": {"tokenBudget": 900}}
    a = Agent.model_validate(agent({"config": {"memory": {**remote, **params}}}))
    assert a.spec.config.memory.client_params.token_budget == 900
    bad = agent({"config": {"memory": {**remote, "clientParams": {"tokenBudget": 0}}}})
    assert any(loc == "spec.config.memory.clientParams.tokenBudget" for loc, _ in errors(Agent, bad))


def test_status_parses_conditions_and_ignores_controller_extras():
    data = agent()
    data["status"] = {
        "phase": "Waiting",
        "conditions": [
            {
                "type": "MemoryDegraded",
                "status": "True",
                "reason": "StoreNotReady",
                "lastTransitionTime": "2026-11-01T10:00:00Z",
            }
        ],
        "observedGeneration": 3,
        "kopf": {"progress": {}},
    }
    a = Agent.model_validate(data)
    assert a.status is not None
    assert a.status.phase is Phase.WAITING
    assert a.status.conditions[0].type == "MemoryDegraded"
    assert a.status.observed_generation == 3


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30), ("2m", 120), ("1h30m", 5400), ("500ms", 0.5), ("1h", 3600), ("1m30s", 90)],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "30", "1.5s", "30 s", "1d", "-1s"])
def test_parse_duration_rejects(text):
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (0.5, "500ms"),
        (30, "30s"),
        (90, "1m30s"),
        (120, "2m"),
        (3600, "1h"),
        (5400.25, "1h30m250ms"),
        (MAX_DURATION_SECONDS, "99999h59m59s999ms"),
    ],
)
def test_format_duration_writes_the_gateway_api_form(seconds, text):
    assert format_duration(seconds) == text


@pytest.mark.parametrize("seconds", [-1, -0.001, MAX_DURATION_SECONDS + 1])
def test_format_duration_refuses_what_the_format_cannot_hold(seconds):
    with pytest.raises(ValueError, match="outside the Gateway API duration range"):
        format_duration(seconds)


@given(st.integers(min_value=0, max_value=round(MAX_DURATION_SECONDS * 1000)))
def test_format_duration_round_trips_through_parse_duration(millis):
    text = format_duration(millis / 1000)
    assert round(parse_duration(text) * 1000) == millis
