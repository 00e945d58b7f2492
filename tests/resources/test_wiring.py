"""Wiring: graph -> per-workload plan, under each URL strategy: agent settings, sub-agents and tool servers,
strict gateway-only traffic, route timeouts."""

import json
from pathlib import Path

import pytest

from kora.agent.settings import load_agent_settings
from kora.core.settings_errors import SettingsError
from kora.resources.graph import ResourceRef
from kora.resources.loader import ManifestError, load_text
from kora.resources.urls import ClusterDNS, GatewayRouted, Loopback, route_path, service_name
from kora.resources.wiring import (
    EnvEntry,
    Probes,
    RouteTimeouts,
    SecretKeyRef,
    plan_workloads,
    route_timeout,
)

pytestmark = pytest.mark.unit

BASE = """
apiVersion: kora.dev/v1alpha1
kind: ModelAPI
metadata: {name: llm, namespace: team}
spec: {mode: Scripted, scriptedConfig: {script: [{reply: hello}]}}
---
apiVersion: kora.dev/v1alpha1
kind: MCPServer
metadata: {name: web-tools, namespace: team}
spec:
  config:
    toolsString: "def ping() -> str:\\n    '''Ping.'''\\n    return 'pong'\\n"
    env:
      - {name: API_URL, value: "http://api"}
      - {name: API_KEY, valueFrom: {secretKeyRef: {name: keys, key: api}}}
---
apiVersion: kora.dev/v1alpha1
kind: MemoryStore
metadata: {name: mem, namespace: team}
spec:
  storage: {type: external, external: {connectionSecretRef: {name: pg, key: url}}}
  models: {summarization: {modelAPI: llm, model: small}, embedding: {modelAPI: llm}}
---
apiVersion: kora.dev/v1alpha1
kind: Agent
metadata: {name: research-bot, namespace: team}
spec: {modelAPI: llm, model: scripted, agentNetwork: {expose: true}}
"""


def with_agent(spec: str) -> str:
    return (
        BASE
        + f"""
---
apiVersion: kora.dev/v1alpha1
kind: Agent
metadata: {{name: boss, namespace: team}}
spec:
{spec}
"""
    )


BOSS = """
  modelAPI: llm
  model: gpt-x
  instructions: Be brief.
  mcpServers: [web-tools]
  agentNetwork: {access: [research-bot]}
  config:
    description: The boss.
    memory: {type: remote, memoryStore: mem, maxReadScope: user, tools: read, failureMode: strict,
             clientParams: {rollingSummary: true, tokenBudget: 1500}}
    env: [{name: AGENT_LOG_LEVEL, value: DEBUG}]
"""

REFS = {
    "model": ResourceRef("ModelAPI", "team", "llm"),
    "mcp": ResourceRef("MCPServer", "team", "web-tools"),
    "mem": ResourceRef("MemoryStore", "team", "mem"),
    "peer": ResourceRef("Agent", "team", "research-bot"),
    "boss": ResourceRef("Agent", "team", "boss"),
}
PORTS = {REFS["model"]: 9001, REFS["mcp"]: 9002, REFS["mem"]: 9003, REFS["peer"]: 9004, REFS["boss"]: 9005}

STRATEGIES = {
    "cluster": ClusterDNS(),
    "gateway": GatewayRouted("http://gw.example:8080/", direct=ClusterDNS()),
    "loopback": Loopback(PORTS),
    "local-gateway": GatewayRouted("http://127.0.0.1:8080", direct=Loopback(PORTS)),
}

# strategy -> (what each kind's URL looks like, listen address of the boss)
EXPECTED_URLS = {
    "cluster": (
        {
            "model": "http://modelapi-llm.team.svc.cluster.local:8000",
            "mcp": "http://mcpserver-web-tools.team.svc.cluster.local:8000",
            "mem": "http://memorystore-mem.team.svc.cluster.local:8000",
            "peer": "http://agent-research-bot.team.svc.cluster.local:8000",
            "boss": "http://agent-boss.team.svc.cluster.local:8000",
        },
        ("0.0.0.0", 8000),
    ),
    "gateway": (
        {
            "model": "http://gw.example:8080/team/modelapi/llm",
            "mcp": "http://gw.example:8080/team/mcp/web-tools",
            "mem": "http://memorystore-mem.team.svc.cluster.local:8000",  # a store is reached directly
            "peer": "http://gw.example:8080/team/agent/research-bot",
            "boss": "http://gw.example:8080/team/agent/boss",
        },
        ("0.0.0.0", 8000),
    ),
    "loopback": (
        {
            "model": "http://127.0.0.1:9001",
            "mcp": "http://127.0.0.1:9002",
            "mem": "http://127.0.0.1:9003",
            "peer": "http://127.0.0.1:9004",
            "boss": "http://127.0.0.1:9005",
        },
        ("127.0.0.1", 9005),
    ),
    "local-gateway": (
        {
            "model": "http://127.0.0.1:8080/team/modelapi/llm",
            "mcp": "http://127.0.0.1:8080/team/mcp/web-tools",
            "mem": "http://127.0.0.1:9003",  # a store is reached directly
            "peer": "http://127.0.0.1:8080/team/agent/research-bot",
            "boss": "http://127.0.0.1:8080/team/agent/boss",
        },
        ("127.0.0.1", 9005),
    ),
}


def otel_resource(kind: str, name: str, namespace: str = "team") -> dict[str, str]:
    """The OTEL_RESOURCE_ATTRIBUTES entry every plan carries."""
    value = f"service.namespace={namespace},kora.resource.kind={kind},kora.resource.name={name}"
    return {"OTEL_RESOURCE_ATTRIBUTES": value}


def env_of(plan) -> dict[str, str | SecretKeyRef]:
    return {e.name: e.value if e.value is not None else e.secret_key_ref for e in plan.env}


@pytest.mark.parametrize("strategy_name", list(STRATEGIES))
def test_agent_environment_under_each_strategy(strategy_name):
    plans = plan_workloads(load_text(with_agent(BOSS)), STRATEGIES[strategy_name])
    urls, listen = EXPECTED_URLS[strategy_name]
    boss = plans[REFS["boss"]]
    env = env_of(boss)
    assert boss.args == ("agent",)
    assert (boss.host, boss.port) == listen
    assert env == {
        "AGENT_NAME": "boss",
        "AGENT_HOST": listen[0],
        "AGENT_PORT": str(listen[1]),
        "MODEL_API_URL": urls["model"] + "/v1",
        "MODEL_NAME": "gpt-x",
        "AGENT_DESCRIPTION": "The boss.",
        "AGENT_INSTRUCTIONS": "Be brief.",
        "AGENT_PUBLIC_URL": urls["boss"],
        "AGENTIC_LOOP_MAX_STEPS": "5",
        "TASK_STORE_TYPE": "local",
        "MCP_SERVERS": "web-tools",
        "MCP_SERVER_WEB_TOOLS_URL": urls["mcp"],
        "PEER_AGENTS": "research-bot",
        "PEER_AGENT_RESEARCH_BOT_CARD_URL": urls["peer"],
        "AGENT_ADMIN_TOKEN": SecretKeyRef("agent-boss-credentials", "admin-token"),
        "MEMORY_ENABLED": "true",
        "MEMORY_CONTEXT_LIMIT": "6",
        "MEMORY_MAX_SESSIONS": "1000",
        "MEMORY_MAX_SESSION_EVENTS": "500",
        "MEMORY_MAX_READ_SCOPE": "user",
        "MEMORY_TOOLS": "read",
        "MEMORY_STORE_ENDPOINT": urls["mem"],
        "MEMORY_STORE_TOKEN": SecretKeyRef("memorystore-mem-credentials", "agent-token"),
        "MEMORY_FAILURE_MODE": "strict",
        "MEMORY_ROLLING_SUMMARY": "true",
        "MEMORY_CLIENT_TOKEN_BUDGET": "1500",
        "OTEL_SERVICE_NAME": "boss",
        **otel_resource("Agent", "boss"),
        "AGENT_LOG_LEVEL": "DEBUG",
    }
    assert boss.env[-1].name == "AGENT_LOG_LEVEL"  # user entries come last
    assert boss.url == urls["boss"]
    assert boss.public_url == urls["boss"]
    assert boss.service_name == "agent-boss"
    assert boss.depends_on == (REFS["model"], REFS["mcp"], REFS["peer"], REFS["mem"])
    assert boss.probes == Probes("/health", "/ready")


@pytest.mark.parametrize("strategy_name", list(STRATEGIES))
def test_agent_environment_is_accepted_by_the_agent_settings(strategy_name):
    plans = plan_workloads(load_text(with_agent(BOSS)), STRATEGIES[strategy_name])
    urls, _ = EXPECTED_URLS[strategy_name]
    settings = load_agent_settings(plans[REFS["boss"]].environment(lambda ref: "secret"))
    assert settings.agent_name == "boss"
    assert settings.model_api_url == urls["model"] + "/v1"
    assert settings.mcp_server_urls == {"web-tools": urls["mcp"] + "/mcp"}
    assert settings.sub_agent_urls == {"research-bot": urls["peer"]}
    assert settings.memory_store_endpoint == urls["mem"]
    assert settings.memory_max_read_scope == "user"
    assert settings.agent_log_level == "DEBUG"


def test_direct_url_is_the_gateway_upstream():
    plans = plan_workloads(load_text(with_agent(BOSS)), STRATEGIES["local-gateway"])
    assert plans[REFS["boss"]].direct_url == "http://127.0.0.1:9005"
    assert plans[REFS["boss"]].url == "http://127.0.0.1:8080/team/agent/boss"


def test_public_strategy_sets_agent_public_url_only():
    plans = plan_workloads(load_text(with_agent(BOSS)), ClusterDNS(), public=GatewayRouted("https://agents.example"))
    boss = plans[REFS["boss"]]
    assert boss.env_value("AGENT_PUBLIC_URL") == "https://agents.example/team/agent/boss"
    assert boss.public_url == "https://agents.example/team/agent/boss"
    assert boss.env_value("MODEL_API_URL") == "http://modelapi-llm.team.svc.cluster.local:8000/v1"


@pytest.mark.parametrize(
    ("spec", "present", "absent", "depends_on"),
    [
        (
            "  modelAPI: llm\n  model: m\n  mcpServers: [web-tools]\n  config: {agenticLoop: {enableTools: false}}\n",
            [],
            ["MCP_SERVERS", "MCP_SERVER_WEB_TOOLS_URL"],
            ["model"],
        ),
        (
            "  modelAPI: llm\n  model: m\n  agentNetwork: {access: [research-bot]}\n"
            "  config: {agenticLoop: {enableDelegation: false}}\n",
            [],
            ["PEER_AGENTS", "PEER_AGENT_RESEARCH_BOT_CARD_URL"],
            ["model"],
        ),
        (
            "  modelAPI: llm\n  model: m\n  config: {memory: {enabled: false}}\n",
            [("MEMORY_ENABLED", "false")],
            ["MEMORY_CONTEXT_LIMIT", "MEMORY_STORE_ENDPOINT", "MEMORY_TOOLS"],
            ["model"],
        ),
        (
            "  modelAPI: llm\n  model: m\n"
            "  config: {memory: {contextLimit: 12, maxSessions: 5, maxSessionEvents: 7}}\n",
            [("MEMORY_CONTEXT_LIMIT", "12"), ("MEMORY_MAX_SESSIONS", "5"), ("MEMORY_MAX_SESSION_EVENTS", "7")],
            [
                "MEMORY_STORE_ENDPOINT",
                "MEMORY_FAILURE_MODE",
                "MEMORY_ROLLING_SUMMARY",
                "MEMORY_CLIENT_TOKEN_BUDGET",
                "MEMORY_TOOLS",
            ],
            ["model"],
        ),
        (
            "  modelAPI: llm\n  model: m\n  waitForDependencies: false\n"
            "  config: {memory: {type: remote, memoryStore: mem}}\n",
            [
                ("MEMORY_STORE_ENDPOINT", "http://memorystore-mem.team.svc.cluster.local:8000"),
                ("MEMORY_CLIENT_TOKEN_BUDGET", "2000"),
            ],
            [],
            ["model"],  # starts without waiting for the store (it may start degraded)
        ),
        (
            "  modelAPI: llm\n  model: m\n  config: {agenticLoop: {maxSteps: 9}, taskStoreType: 'null'}\n",
            [("AGENTIC_LOOP_MAX_STEPS", "9"), ("TASK_STORE_TYPE", "null")],
            ["AGENT_DESCRIPTION", "AGENT_INSTRUCTIONS", "OTEL_EXPORTER_OTLP_ENDPOINT"],
            ["model"],
        ),
        (
            "  modelAPI: llm\n  model: m\n  config: {instructions: From config.}\n",
            [("AGENT_INSTRUCTIONS", "From config.")],
            [],
            ["model"],
        ),
        (
            "  modelAPI: llm\n  model: m\n  telemetry: {endpoint: 'http://otel:4318'}\n",
            [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel:4318"), ("OTEL_SERVICE_NAME", "boss")],
            [],
            ["model"],
        ),
    ],
)
def test_agent_options(spec, present, absent, depends_on):
    boss = plan_workloads(load_text(with_agent(spec)), ClusterDNS())[REFS["boss"]]
    env = env_of(boss)
    for name, value in present:
        assert env[name] == value
    for name in absent:
        assert name not in env
    assert boss.depends_on == tuple(REFS[key] for key in depends_on)


def test_replicas_are_carried():
    boss = plan_workloads(load_text(with_agent("  modelAPI: llm\n  model: m\n  replicas: 3\n")), ClusterDNS())
    assert boss[REFS["boss"]].replicas == 3


@pytest.mark.parametrize("strategy_name", ["cluster", "loopback"])
def test_mcp_server_plan(strategy_name):
    plan = plan_workloads(load_text(BASE), STRATEGIES[strategy_name])[REFS["mcp"]]
    _, listen = EXPECTED_URLS[strategy_name]
    port = listen[1] if strategy_name == "cluster" else 9002
    assert plan.args == ("mcp", "--host", listen[0], "--port", str(port))
    assert plan.env == (
        EnvEntry("MCP_TOOLS_STRING", "def ping() -> str:\n    '''Ping.'''\n    return 'pong'\n"),
        EnvEntry("OTEL_SERVICE_NAME", "mcpserver-web-tools"),
        EnvEntry(*otel_resource("MCPServer", "web-tools").popitem()),
        EnvEntry("API_URL", "http://api"),
        EnvEntry("API_KEY", secret_key_ref=SecretKeyRef("keys", "api")),
    )
    assert plan.depends_on == ()
    assert plan.probes == Probes("/health", "/ready")


def test_mcp_package_plan():
    text = """
apiVersion: kora.dev/v1alpha1
kind: MCPServer
metadata: {name: fetch}
spec: {type: python-package, config: {mcp: mcp-server-fetch}}
"""
    plan = next(iter(plan_workloads(load_text(text), ClusterDNS()).values()))
    assert plan.env[0] == EnvEntry("MCP_PACKAGE", "mcp-server-fetch")


def model_plan(spec: str):
    text = f"apiVersion: kora.dev/v1alpha1\nkind: ModelAPI\nmetadata: {{name: llm}}\nspec: {spec}\n"
    return next(iter(plan_workloads(load_text(text), ClusterDNS()).values()))


@pytest.mark.parametrize(
    ("spec", "args", "env", "files"),
    [
        (
            "{mode: Scripted, scriptedConfig: {script: [{when: {user_matches: hi}, reply: hello}]}}",
            ("model", "--host", "0.0.0.0", "--port", "8000", "--script", "script.json"),
            {},
            {"rules": [{"when": {"user_matches": "hi"}, "reply": "hello"}]},
        ),
        ("{mode: Scripted}", ("model", "--host", "0.0.0.0", "--port", "8000"), {}, None),
        (
            "{mode: Proxy, proxyConfig: {apiBase: 'https://api.openai.com/v1', models: [a, b],"
            " apiKey: {valueFrom: {secretKeyRef: {name: openai, key: key}}}}}",
            ("model-proxy", "--host", "0.0.0.0", "--port", "8000"),
            {
                "MODEL_PROXY_API_BASE": "https://api.openai.com/v1",
                "MODEL_PROXY_API_KEY": SecretKeyRef("openai", "key"),
                "MODEL_PROXY_MODELS": "a,b",
            },
            None,
        ),
        (
            "{mode: Proxy, proxyConfig: {apiBase: 'http://ollama:11434/v1', apiKey: {value: none}}}",
            ("model-proxy", "--host", "0.0.0.0", "--port", "8000"),
            {"MODEL_PROXY_API_BASE": "http://ollama:11434/v1", "MODEL_PROXY_API_KEY": "none"},
            None,
        ),
        (
            "{mode: Hosted, hostedConfig: {model: all-MiniLM-L6-v2}}",
            ("model-hosted", "--host", "0.0.0.0", "--port", "8000"),
            {"MODEL_HOSTED_MODEL": "all-MiniLM-L6-v2"},
            None,
        ),
        (
            "{mode: Hosted, hostedConfig: {model: 'smollm2:135m'}}",
            ("model-hosted", "--host", "0.0.0.0", "--port", "8000"),
            {"MODEL_HOSTED_MODEL": "smollm2:135m"},
            None,
        ),
    ],
)
def test_model_api_plans(spec, args, env, files):
    plan = model_plan(spec)
    assert plan.args == args
    assert env_of(plan) == {**env, "OTEL_SERVICE_NAME": "modelapi-llm", **otel_resource("ModelAPI", "llm", "default")}
    # A hosted model is ready once its weights have loaded; the others as soon as they answer.
    readiness = "/ready" if args[0] == "model-hosted" else "/health"
    assert plan.probes == Probes("/health", readiness)
    if files is None:
        assert plan.files == {}
    else:
        assert json.loads(plan.files["script.json"]) == files


def test_script_file_is_passed_as_a_path(tmp_path):
    (tmp_path / "rules.yaml").write_text("rules: []\n")
    text = "apiVersion: kora.dev/v1alpha1\nkind: ModelAPI\nmetadata: {name: llm}\n"
    text += "spec: {mode: Scripted, scriptedConfig: {scriptFile: rules.yaml}}\n"
    plan = next(iter(plan_workloads(load_text(text, base_dir=tmp_path), ClusterDNS()).values()))
    assert plan.args[-2:] == ("--script", str(tmp_path / "rules.yaml"))
    assert plan.files == {}


#: What a MemoryStore's tier settings become when the spec leaves them out (the contract's defaults).
#: The store's generated credentials, from the Secret the runner creates for it.
STORE_CREDENTIALS = {
    "MEMORY_SERVICE_ADMIN_TOKEN": SecretKeyRef("memorystore-mem-credentials", "admin-token"),
    "MEMORY_SERVICE_AGENT_TOKEN": SecretKeyRef("memorystore-mem-credentials", "agent-token"),
}
TIER_DEFAULTS = {
    "MEMORY_SERVICE_SHORT_TERM_TOKEN_BUDGET": "2000",
    "MEMORY_SERVICE_SHORT_TERM_HARD_EVENT_CAP": "50",
    "MEMORY_SERVICE_MEDIUM_TERM_ENABLED": "true",
    "MEMORY_SERVICE_COMPACTION_TRIGGER": "20",
    "MEMORY_SERVICE_COMPACTION_TARGET": "400",
    "MEMORY_SERVICE_DIGEST_RETENTION": "5",
    "MEMORY_SERVICE_LONG_TERM_ENABLED": "true",
    "MEMORY_SERVICE_DEFAULT_TOP_K": "5",
    "MEMORY_SERVICE_SCORE_THRESHOLD": "0.2",
    "MEMORY_SERVICE_MAX_READ_SCOPE": "user",
}


@pytest.mark.parametrize("strategy_name", list(STRATEGIES))
def test_memory_store_plan(strategy_name):
    plan = plan_workloads(load_text(BASE), STRATEGIES[strategy_name])[REFS["mem"]]
    urls, _ = EXPECTED_URLS[strategy_name]
    assert plan.args[0] == "memory"
    assert env_of(plan) == {
        "MEMORY_SERVICE_STORAGE_MODE": "external",
        **STORE_CREDENTIALS,
        "MEMORY_SERVICE_DATABASE_URL": SecretKeyRef("pg", "url"),
        "MEMORY_SERVICE_SUMMARY_MODEL_API_URL": urls["model"] + "/v1",
        "MEMORY_SERVICE_SUMMARY_MODEL": "small",
        "MEMORY_SERVICE_EMBEDDING_MODEL_API_URL": urls["model"] + "/v1",
        **TIER_DEFAULTS,
        "OTEL_SERVICE_NAME": "memorystore-mem",
        **otel_resource("MemoryStore", "mem"),
    }
    assert plan.depends_on == (REFS["model"],)


def store_env(spec: str, strategy_name: str = "cluster", data_root: Path | None = None) -> dict[str, object]:
    text = (
        f"apiVersion: kaos.tools/v1alpha1\nkind: MemoryStore\nmetadata: {{name: mem, namespace: team}}\nspec: {spec}\n"
    )
    plans = plan_workloads(load_text(text), STRATEGIES[strategy_name], data_root=data_root)
    return env_of(plans[REFS["mem"]])


EXTERNAL = "storage: {type: external, external: {connectionSecretRef: {name: pg, key: url}}}"
TIERS = (
    "shortTerm: {tokenBudget: 3000, hardEventCap: 80}, "
    "mediumTerm: {enabled: false, compactionTrigger: 10, compactionTarget: 300, digestRetention: 2}, "
    "longTerm: {enabled: false, defaultTopK: 8, scoreThreshold: 0.75}, maxReadScope: agent"
)


@pytest.mark.parametrize(
    ("spec", "strategy_name", "data_root", "expected"),
    [
        # Cluster: local storage keeps the service's default data directory.
        ("{}", "cluster", None, {"MEMORY_SERVICE_STORAGE_MODE": "local", **TIER_DEFAULTS}),
        ("{storage: {mode: local}}", "gateway", None, {"MEMORY_SERVICE_STORAGE_MODE": "local", **TIER_DEFAULTS}),
        # kora up: local storage gets a directory of its own under the runner's data root.
        (
            "{}",
            "loopback",
            Path("/state/memory"),
            {
                "MEMORY_SERVICE_STORAGE_MODE": "local",
                "MEMORY_SERVICE_DATA_DIR": "/state/memory/team/mem",
                **TIER_DEFAULTS,
            },
        ),
        # External storage never gets a data directory, whatever the runner.
        (
            f"{{{EXTERNAL}}}",
            "local-gateway",
            Path("/state/memory"),
            {
                "MEMORY_SERVICE_STORAGE_MODE": "external",
                "MEMORY_SERVICE_DATABASE_URL": SecretKeyRef("pg", "url"),
                **TIER_DEFAULTS,
            },
        ),
        (
            f"{{{TIERS}}}",
            "cluster",
            None,
            {
                "MEMORY_SERVICE_STORAGE_MODE": "local",
                "MEMORY_SERVICE_SHORT_TERM_TOKEN_BUDGET": "3000",
                "MEMORY_SERVICE_SHORT_TERM_HARD_EVENT_CAP": "80",
                "MEMORY_SERVICE_MEDIUM_TERM_ENABLED": "false",
                "MEMORY_SERVICE_COMPACTION_TRIGGER": "10",
                "MEMORY_SERVICE_COMPACTION_TARGET": "300",
                "MEMORY_SERVICE_DIGEST_RETENTION": "2",
                "MEMORY_SERVICE_LONG_TERM_ENABLED": "false",
                "MEMORY_SERVICE_DEFAULT_TOP_K": "8",
                "MEMORY_SERVICE_SCORE_THRESHOLD": "0.75",
                "MEMORY_SERVICE_MAX_READ_SCOPE": "agent",
            },
        ),
        (
            "{longTerm: {scoreThreshold: 1}}",
            "cluster",
            None,
            {"MEMORY_SERVICE_STORAGE_MODE": "local", **TIER_DEFAULTS, "MEMORY_SERVICE_SCORE_THRESHOLD": "1.0"},
        ),
    ],
)
def test_memory_store_options(spec, strategy_name, data_root, expected):
    assert store_env(spec, strategy_name, data_root) == {
        **expected,
        **STORE_CREDENTIALS,
        "OTEL_SERVICE_NAME": "memorystore-mem",
        **otel_resource("MemoryStore", "mem"),
    }


def test_plans_come_in_start_order():
    plans = plan_workloads(load_text(with_agent(BOSS)), ClusterDNS())
    assert list(plans) == [REFS["model"], REFS["mcp"], REFS["mem"], REFS["peer"], REFS["boss"]]


def test_environment_resolves_secrets_through_the_callback():
    plan = plan_workloads(load_text(BASE), ClusterDNS())[REFS["mcp"]]
    env = plan.environment(lambda ref: f"<{ref.name}/{ref.key}>")
    assert env["API_KEY"] == "<keys/api>"
    assert env["API_URL"] == "http://api"


def test_loopback_without_a_port_names_the_workload():
    with pytest.raises(KeyError, match="MCPServer team/web-tools"):
        plan_workloads(load_text(BASE), Loopback({REFS["model"]: 1}))


def test_gateway_needs_an_http_base_url():
    with pytest.raises(ValueError, match="http"):
        GatewayRouted("gw:8080")


@pytest.mark.parametrize(
    ("kind", "name", "service", "path"),
    [
        ("Agent", "a", "agent-a", "/ns/agent/a"),
        ("ModelAPI", "m", "modelapi-m", "/ns/modelapi/m"),
        ("MCPServer", "t", "mcpserver-t", "/ns/mcp/t"),
        ("MemoryStore", "s", "memorystore-s", "/ns/memorystore/s"),
    ],
)
def test_service_names_and_route_paths(kind, name, service, path):
    assert service_name(kind, name) == service
    assert route_path(kind, "ns", name) == path


ROUTE_DOCS = {
    "Agent": "kind: Agent\nmetadata: {name: a}\nspec: {modelAPI: m, model: x%s}\n",
    "ModelAPI": "kind: ModelAPI\nmetadata: {name: m}\nspec: {mode: Scripted%s}\n",
    "MCPServer": "kind: MCPServer\nmetadata: {name: t}\nspec: {config: {toolsString: 'x = 1'}%s}\n",
    "MemoryStore": "kind: MemoryStore\nmetadata: {name: s}\nspec: {storage: {type: local}%s}\n",
}


def resource_of(kind: str, route: str = ""):
    import yaml

    from kora.resources.models import RESOURCE_CLASSES

    body = yaml.safe_load("apiVersion: kora.dev/v1alpha1\n" + ROUTE_DOCS[kind] % route)
    return RESOURCE_CLASSES[kind].model_validate(body)


@pytest.mark.parametrize(
    ("kind", "route", "seconds"),
    [
        ("Agent", "", 120),
        ("ModelAPI", "", 120),
        ("MCPServer", "", 30),
        ("MemoryStore", "", 30),
        ("Agent", ", gatewayRoute: {timeout: 5m}", 300),
        ("ModelAPI", ", gatewayRoute: {timeout: 1h30m}", 5400),
        ("MCPServer", ", gatewayRoute: {timeout: 90s}", 90),
        ("MemoryStore", ", gatewayRoute: {timeout: 500ms}", 0.5),
    ],
)
def test_route_timeout(kind, route, seconds):
    assert route_timeout(resource_of(kind, route)) == seconds


def test_route_timeout_defaults_from_operator_environment():
    defaults = RouteTimeouts.from_env(
        {
            "GATEWAY_DEFAULT_AGENT_TIMEOUT": "10m",
            "GATEWAY_DEFAULT_MODELAPI_TIMEOUT": "5m",
            "GATEWAY_DEFAULT_MCP_TIMEOUT": "1m",
        }
    )
    assert (defaults.agent, defaults.model_api, defaults.mcp, defaults.memory_store) == (600, 300, 60, 30)
    assert route_timeout(resource_of("Agent"), defaults) == 600
    assert route_timeout(resource_of("Agent", ", gatewayRoute: {timeout: 2m}"), defaults) == 120
    with pytest.raises(ValueError, match="GATEWAY_DEFAULT_MCP_TIMEOUT"):
        RouteTimeouts.from_env({"GATEWAY_DEFAULT_MCP_TIMEOUT": "soon"})


def test_env_entry_needs_exactly_one_source():
    with pytest.raises(ValueError, match="exactly one"):
        EnvEntry("X")
    with pytest.raises(ValueError, match="exactly one"):
        EnvEntry("X", value="1", secret_key_ref=SecretKeyRef("s", "k"))


def test_a_users_resource_attributes_are_merged_after_the_wirings():
    text = (
        "apiVersion: kora.dev/v1alpha1\nkind: MCPServer\nmetadata: {name: tools, namespace: team}\n"
        "spec:\n  type: python-runtime\n  config:\n    toolsString: \"def f() -> str:\\n    return ''\\n\"\n"
        "    env: [{name: OTEL_RESOURCE_ATTRIBUTES, value: ' owner=ops '}, {name: X, value: y}]\n"
    )
    plan = next(iter(plan_workloads(load_text(text), ClusterDNS()).values()))
    assert [entry.name for entry in plan.env].count("OTEL_RESOURCE_ATTRIBUTES") == 1
    merged = otel_resource("MCPServer", "tools")["OTEL_RESOURCE_ATTRIBUTES"] + ",owner=ops"
    assert env_of(plan)["OTEL_RESOURCE_ATTRIBUTES"] == merged
    assert plan.env[-1] == EnvEntry("X", "y")


def test_budget_and_the_model_apis_prices_reach_the_agent_and_its_settings():
    priced = BASE.replace(
        "spec: {mode: Scripted, scriptedConfig: {script: [{reply: hello}]}}",
        "spec: {mode: Scripted, scriptedConfig: {script: [{reply: hello}]}, "
        "pricing: {inputPerMillion: 2.5, outputPerMillion: 10}}",
    )
    agent = """
---
apiVersion: kora.dev/v1alpha1
kind: Agent
metadata: {name: boss, namespace: team}
spec:
  modelAPI: llm
  model: scripted
  config:
    budget: {maxToolCalls: 0, maxModelRequests: 4, maxTokens: 9000, maxSeconds: 30, maxCostUsd: 0.25}
"""
    plan = plan_workloads(load_text(priced + agent), STRATEGIES["cluster"])[REFS["boss"]]
    env = env_of(plan)
    assert {name: value for name, value in env.items() if name.startswith(("BUDGET_", "MODEL_PRICE_"))} == {
        "BUDGET_MAX_TOOL_CALLS": "0",
        "BUDGET_MAX_MODEL_REQUESTS": "4",
        "BUDGET_MAX_TOKENS": "9000",
        "BUDGET_MAX_SECONDS": "30",
        "BUDGET_MAX_COST_USD": "0.25",
        "MODEL_PRICE_INPUT_PER_MILLION": "2.5",
        "MODEL_PRICE_OUTPUT_PER_MILLION": "10",
    }
    settings = load_agent_settings(plan.environment(lambda ref: "secret"))
    assert (settings.budget_max_tool_calls, settings.budget_max_cost_usd) == (0, 0.25)
    assert settings.model_price_output_per_million == 10
    # Unset fields write nothing: no limit.
    unbounded = plan_workloads(load_text(with_agent(BOSS)), STRATEGIES["cluster"])[REFS["boss"]]
    assert not [e.name for e in unbounded.env if e.name.startswith(("BUDGET_", "MODEL_PRICE_"))]


def test_a_cost_budget_without_prices_stops_the_agent_with_a_message_naming_the_settings():
    from kora.core.settings_errors import SettingsError

    agent = """
---
apiVersion: kora.dev/v1alpha1
kind: Agent
metadata: {name: boss, namespace: team}
spec: {modelAPI: llm, model: scripted, config: {budget: {maxCostUsd: 1}}}
"""
    plan = plan_workloads(load_text(BASE + agent), STRATEGIES["cluster"])[REFS["boss"]]
    with pytest.raises(SettingsError, match="MODEL_PRICE_INPUT_PER_MILLION"):
        load_agent_settings(plan.environment(lambda ref: "secret"))


def test_the_shared_task_store_reaches_the_agent_with_its_url_from_a_secret():
    spec = (
        "  modelAPI: llm\n  model: m\n  replicas: 2\n  config:\n    taskStoreType: postgres\n    env:\n"
        "    - {name: TASK_STORE_URL, valueFrom: {secretKeyRef: {name: tasks-db, key: url}}}\n"
    )
    boss = plan_workloads(load_text(with_agent(spec)), ClusterDNS())[REFS["boss"]]
    env = env_of(boss)
    assert env["TASK_STORE_TYPE"] == "postgres"
    assert env["TASK_STORE_URL"] == SecretKeyRef("tasks-db", "url")
    assert boss.replicas == 2


SHARING = (
    "  modelAPI: llm\n  model: m\n  replicas: 2\n"
    "  config: {taskStoreType: postgres, memory: {type: remote, memoryStore: mem}}\n"
)


def test_a_shared_task_store_without_its_own_url_uses_the_bound_external_stores_secret():
    # The MemoryStore's own connection Secret, as a secretKeyRef: the URL (and its password) never in the plan.
    for strategy in (ClusterDNS(), STRATEGIES["loopback"]):
        boss = plan_workloads(load_text(with_agent(SHARING)), strategy, embedded_postgres=True)[REFS["boss"]]
        env = env_of(boss)
        assert env["TASK_STORE_TYPE"] == "postgres"
        assert env["TASK_STORE_URL"] == SecretKeyRef("pg", "url")
        settings = load_agent_settings(boss.environment(lambda ref: "postgresql://kora:pw@db:5432/kora"))
        assert settings.task_store_url == "postgresql://kora:pw@db:5432/kora"


def test_an_agents_own_task_store_url_wins_over_its_memory_stores():
    spec = SHARING.replace(
        "memoryStore: mem}}",
        "memoryStore: mem}, env: [{name: TASK_STORE_URL, valueFrom: {secretKeyRef: {name: tasks-db, key: url}}}]}",
    )
    boss = plan_workloads(load_text(with_agent(spec)), ClusterDNS())[REFS["boss"]]
    assert [e.secret_key_ref for e in boss.env if e.name == "TASK_STORE_URL"] == [SecretKeyRef("tasks-db", "url")]


LOCAL_STORE = BASE.replace("  storage: {type: external, external: {connectionSecretRef: {name: pg, key: url}}}\n", "")


def test_kora_up_shares_a_local_memory_stores_embedded_postgres_by_its_socket(tmp_path):
    graph = load_text(with_agent(SHARING).replace(BASE, LOCAL_STORE))
    plans = plan_workloads(graph, STRATEGIES["loopback"], data_root=tmp_path, embedded_postgres=True)
    env = env_of(plans[REFS["boss"]])
    socket_dir = tmp_path.resolve() / "team" / "mem" / "pgdata"
    assert env["TASK_STORE_URL"] == f"postgresql://postgres@/postgres?host={socket_dir}"
    assert env_of(plans[REFS["mem"]])["MEMORY_SERVICE_DATA_DIR"] == str(tmp_path / "team" / "mem")
    assert load_agent_settings(plans[REFS["boss"]].environment(lambda ref: "s")).task_store_url.startswith(
        "postgresql://postgres@/postgres?host=/"
    )


def test_a_local_memory_stores_postgres_is_not_shared_where_agents_cannot_reach_it(tmp_path):
    graph = load_text(with_agent(SHARING).replace(BASE, LOCAL_STORE))
    # A cluster: the embedded Postgres is inside the MemoryStore's pod.
    with pytest.raises(ManifestError, match=r"storage\.type 'external'") as refused:
        plan_workloads(graph, ClusterDNS(), data_root=Path("/data"))
    assert "team/boss" in str(refused.value)
    # kora up with a state dir so deep that the socket's path cannot be bound.
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    with pytest.raises(ManifestError, match="shorter --state-dir"):
        plan_workloads(graph, STRATEGIES["loopback"], data_root=deep, embedded_postgres=True)


def test_prices_and_budgets_reach_the_agent_exactly():
    priced = BASE.replace(
        "spec: {mode: Scripted, scriptedConfig: {script: [{reply: hello}]}}",
        "spec: {mode: Scripted, scriptedConfig: {script: [{reply: hello}]}, "
        "pricing: {inputPerMillion: 0.1234567, outputPerMillion: 1234567}}",
    )
    agent = """
---
apiVersion: kora.dev/v1alpha1
kind: Agent
metadata: {name: boss, namespace: team}
spec: {modelAPI: llm, model: scripted, config: {budget: {maxSeconds: 0.000125, maxCostUsd: 12345.678901}}}
"""
    env = env_of(plan_workloads(load_text(priced + agent), STRATEGIES["cluster"])[REFS["boss"]])
    assert env["MODEL_PRICE_INPUT_PER_MILLION"] == "0.1234567"
    assert env["MODEL_PRICE_OUTPUT_PER_MILLION"] == "1234567"
    assert env["BUDGET_MAX_SECONDS"] == "0.000125"
    assert env["BUDGET_MAX_COST_USD"] == "12345.678901"


def test_tool_approval_reaches_the_agent_and_its_settings():
    agent = """
---
apiVersion: kora.dev/v1alpha1
kind: Agent
metadata: {name: boss, namespace: team}
spec:
  modelAPI: llm
  model: scripted
  config:
    toolApproval: {required: [files/delete_*, agents/*], timeoutSeconds: 120}
"""
    plan = plan_workloads(load_text(BASE + agent), STRATEGIES["cluster"])[REFS["boss"]]
    env = env_of(plan)
    assert env["TOOL_APPROVAL_REQUIRED"] == "files/delete_*,agents/*"
    assert env["TOOL_APPROVAL_TIMEOUT_SECONDS"] == "120"
    settings = load_agent_settings(plan.environment(lambda ref: "secret"))
    assert settings.tool_approval_required == "files/delete_*,agents/*"
    assert settings.tool_approval_timeout_seconds == 120
    # Unset: nothing written, no call waits.
    plain = plan_workloads(load_text(with_agent(BOSS)), STRATEGIES["cluster"])[REFS["boss"]]
    assert not [e.name for e in plain.env if e.name.startswith("TOOL_APPROVAL_")]


@pytest.mark.parametrize("pattern", ["files", "a/b/c", "a b/c", "x/y,z/w", ""])
def test_a_tool_approval_pattern_that_is_no_server_tool_pair_is_refused(pattern):
    agent = f"""
---
apiVersion: kora.dev/v1alpha1
kind: Agent
metadata: {{name: boss, namespace: team}}
spec: {{modelAPI: llm, model: scripted, config: {{toolApproval: {{required: ["{pattern}"]}}}}}}
"""
    with pytest.raises(Exception, match="required"):
        plan_workloads(load_text(BASE + agent), STRATEGIES["cluster"])


def test_a_manifest_and_the_agent_refuse_a_tool_approval_pattern_in_the_same_words():
    agent = """
---
apiVersion: kora.dev/v1alpha1
kind: Agent
metadata: {name: boss, namespace: team}
spec: {modelAPI: llm, model: scripted, config: {toolApproval: {required: [delete_file]}}}
"""
    with pytest.raises(ManifestError) as manifest:
        load_text(BASE + agent)
    with pytest.raises(SettingsError) as settings:
        load_agent_settings(
            {
                "AGENT_NAME": "a",
                "MODEL_API_URL": "http://m/v1",
                "MODEL_NAME": "m",
                "TOOL_APPROVAL_REQUIRED": "delete_file",
            }
        )
    reason = "'delete_file' is no '<server>/<tool>' pattern (e.g. 'files/delete_*', 'agents/*')"
    assert f"spec.config.toolApproval.required[0]: {reason}" in str(manifest.value)
    assert reason in str(settings.value)
    assert "should match pattern" not in str(manifest.value)
