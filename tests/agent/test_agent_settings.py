"""Agent settings: defaults, environment names and the start-up error that names every bad setting."""

import pytest

from kora.agent.settings import load_agent_settings, parse_sub_agents
from kora.core.settings_errors import SettingsError

pytestmark = pytest.mark.unit

REQUIRED = {"AGENT_NAME": "a", "MODEL_API_URL": "http://model:8000/v1", "MODEL_NAME": "m"}


def test_defaults_follow_the_spec():
    s = load_agent_settings(REQUIRED)
    assert (s.agent_description, s.agent_instructions) == ("AI Agent", "You are a helpful assistant.")
    assert (s.agent_port, s.agent_log_level, s.agent_access_log) == (8000, "INFO", False)
    assert (s.agentic_loop_max_steps, s.memory_enabled, s.memory_context_limit) == (5, True, 6)
    assert (s.memory_max_sessions, s.memory_max_session_events) == (1000, 500)
    assert (s.memory_store_endpoint, s.memory_max_read_scope, s.memory_tools) == ("", "session", None)
    assert s.task_store_type == "local"
    assert s.mcp_server_urls == {}
    assert s.sub_agent_urls == {}


def test_values_are_read_from_upper_case_variables():
    s = load_agent_settings(
        REQUIRED
        | {"AGENT_PORT": "9001", "MEMORY_ENABLED": "false", "AGENTIC_LOOP_MAX_STEPS": "3", "MEMORY_TOOLS": "read"}
    )
    assert (s.agent_port, s.memory_enabled, s.agentic_loop_max_steps, s.memory_tools) == (9001, False, 3, "read")


def test_tool_server_and_peer_urls_are_resolved_by_name():
    s = load_agent_settings(
        REQUIRED
        | {
            "MCP_SERVERS": "web-search, calc",
            "MCP_SERVER_WEB_SEARCH_URL": "http://web-search.ns.svc:8000",
            "MCP_SERVER_CALC_URL": "http://calc:80/mcp",
            "PEER_AGENTS": "research-bot",
            "PEER_AGENT_RESEARCH_BOT_CARD_URL": "http://research-bot:8000/",
            "AGENT_SUB_AGENTS": "math:http://math:8000",
        }
    )
    assert s.mcp_server_urls == {"web-search": "http://web-search.ns.svc:8000/mcp", "calc": "http://calc:80/mcp"}
    assert s.sub_agent_urls == {"math": "http://math:8000", "research-bot": "http://research-bot:8000"}


def test_every_bad_setting_is_named_in_one_error():
    with pytest.raises(SettingsError) as caught:
        load_agent_settings({"AGENT_PORT": "abc", "AGENT_SUB_AGENTS": "nourl", "MCP_SERVERS": "x"})
    message = str(caught.value)
    for variable in ("AGENT_NAME", "MODEL_API_URL", "MODEL_NAME", "AGENT_PORT", "AGENT_SUB_AGENTS", "MCP_SERVER_X_URL"):
        assert variable in message
    assert len(caught.value.problems) == 6


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("MODEL_API_URL", "not-a-url"),
        ("AGENT_PORT", "70000"),
        ("AGENTIC_LOOP_MAX_STEPS", "0"),
        ("MEMORY_TOOLS", "everything"),
        ("TASK_STORE_TYPE", "redis"),
        ("AGENT_LOG_LEVEL", "loud"),
        ("MEMORY_ENABLED", "maybe"),
        ("AUTH_JWT_JWKS_URL", "file:///etc/keys.json"),
        ("AUTH_JWT_JWKS_URL", "idp.example.com/jwks"),
        ("AUTH_JWT_ISSUER", "https://idp.example.com"),  # without AUTH_JWT_JWKS_URL
        ("AUTH_JWT_AUDIENCE", "kora"),  # without AUTH_JWT_JWKS_URL
        ("AUTH_JWT_USER_CLAIM", "email"),  # without AUTH_JWT_JWKS_URL
        ("AUTH_TRUSTED_USER_HEADER", "X Forwarded User"),
        ("AUTH_TRUSTED_USER_HEADER", "Authorization"),
        ("AUTH_TRUSTED_USER_HEADER", "x-session-id"),
    ],
)
def test_malformed_values_are_rejected_with_the_variable_name(variable, value):
    with pytest.raises(SettingsError) as caught:
        load_agent_settings(REQUIRED | {variable: value})
    assert caught.value.problems
    assert caught.value.problems[0].startswith(variable)


def test_sub_agent_urls_keep_their_colons():
    assert parse_sub_agents("a:http://a:8000, b:https://b.example/x") == {
        "a": "http://a:8000",
        "b": "https://b.example/x",
    }
    with pytest.raises(ValueError, match="'b'"):
        parse_sub_agents("a:http://a:1,b")


@pytest.mark.parametrize("scope", ["agent", "user"])
def test_a_pooled_read_scope_without_a_memory_store_is_a_start_up_error(scope):
    with pytest.raises(SettingsError) as caught:
        load_agent_settings(REQUIRED | {"MEMORY_MAX_READ_SCOPE": scope})
    (problem,) = caught.value.problems
    assert problem.startswith("MEMORY_MAX_READ_SCOPE:")
    assert "MEMORY_STORE_ENDPOINT" in problem


@pytest.mark.parametrize(
    ("extra", "scope"),
    [
        ({"MEMORY_MAX_READ_SCOPE": "user", "MEMORY_STORE_ENDPOINT": "http://store:8000"}, "user"),
        ({"MEMORY_MAX_READ_SCOPE": "agent", "MEMORY_STORE_ENDPOINT": "http://store:8000"}, "agent"),
        ({"MEMORY_MAX_READ_SCOPE": "user", "MEMORY_ENABLED": "false"}, "user"),  # NullMemory reads nothing anyway
        ({"MEMORY_MAX_READ_SCOPE": "session"}, "session"),
    ],
)
def test_a_pooled_read_scope_is_accepted_with_a_memory_store_or_without_memory(extra, scope):
    assert load_agent_settings(REQUIRED | extra).memory_max_read_scope == scope


def test_the_administrators_store_scope_is_never_an_agents_ceiling():
    with pytest.raises(SettingsError) as caught:
        load_agent_settings(REQUIRED | {"MEMORY_MAX_READ_SCOPE": "store", "MEMORY_STORE_ENDPOINT": "http://s:1"})
    assert caught.value.problems[0].startswith("MEMORY_MAX_READ_SCOPE:")
    assert "'session', 'agent' or 'user'" in caught.value.problems[0]


def test_identity_is_off_by_default_and_the_token_settings_come_together():
    s = load_agent_settings(REQUIRED)
    assert (s.auth_jwt_jwks_url, s.auth_trusted_user_header, s.auth_jwt_user_claim) == ("", "", "sub")
    s = load_agent_settings(
        REQUIRED
        | {
            "AUTH_JWT_JWKS_URL": "https://idp.example.com/jwks",
            "AUTH_JWT_ISSUER": "https://idp.example.com",
            "AUTH_JWT_AUDIENCE": "kora",
            "AUTH_JWT_USER_CLAIM": "email",
            "AUTH_TRUSTED_USER_HEADER": "X-Forwarded-User",
        }
    )
    assert (s.auth_jwt_issuer, s.auth_jwt_audience) == ("https://idp.example.com", "kora")
    assert s.auth_jwt_user_claim == "email"
    assert s.auth_trusted_user_header == "X-Forwarded-User"


def test_token_settings_without_a_key_set_are_each_named_with_the_other_problems():
    with pytest.raises(SettingsError) as caught:
        load_agent_settings(REQUIRED | {"AUTH_JWT_ISSUER": "i", "AUTH_JWT_AUDIENCE": "a", "AGENT_PORT": "x"})
    assert [problem.split(":")[0] for problem in caught.value.problems] == [
        "AUTH_JWT_ISSUER",
        "AUTH_JWT_AUDIENCE",
        "AGENT_PORT",
    ]
    assert "AUTH_JWT_JWKS_URL" in caught.value.problems[0]


def test_empty_settings_count_as_unset_and_whitespace_is_trimmed():
    load = load_agent_settings
    base = {"AGENT_NAME": "a", "MODEL_API_URL": "http://127.0.0.1:1/v1", "MODEL_NAME": "m"}
    settings = load({**base, "MEMORY_TOOLS": "", "MEMORY_ENABLED": " true", "AGENTIC_LOOP_MAX_STEPS": " 3 "})
    assert settings.memory_enabled is True
    assert settings.agentic_loop_max_steps == 3
    assert settings.memory_tools == load(base).memory_tools


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"TASK_STORE_TYPE": "postgres"}, "TASK_STORE_URL: required with TASK_STORE_TYPE=postgres"),
        ({"TASK_STORE_TYPE": "postgres", "TASK_STORE_URL": "http://u:pw-9@db/x"}, "must be a postgresql://"),
        ({"TASK_STORE_TYPE": "postgres", "TASK_STORE_URL": "postgresql://u:pw-9@db:port/x"}, "must be a postgresql://"),
        ({"TASK_STORE_URL": "postgresql://u:pw-9@db/x"}, "only read with TASK_STORE_TYPE=postgres"),
        ({"TASK_STORE_TYPE": "postgres", "TASK_STORE_URL": "postgresql://db/x", "TASK_LEASE_SECONDS": "90"}, "60"),
    ],
)
def test_the_shared_task_store_settings_are_checked_without_echoing_the_url(env, says):
    with pytest.raises(SettingsError) as raised:
        load_agent_settings({**REQUIRED, **env})
    assert says in str(raised.value)
    assert "pw-9" not in str(raised.value)


def test_the_shared_task_store_reads_its_url_and_lease():
    env = {"TASK_STORE_TYPE": "postgres", "TASK_STORE_URL": "postgresql://u:pw@db:5432/kora", "TASK_LEASE_SECONDS": "5"}
    settings = load_agent_settings({**REQUIRED, **env})
    assert (settings.task_store_type, settings.task_store_url, settings.task_lease_seconds) == (
        "postgres",
        "postgresql://u:pw@db:5432/kora",
        5.0,
    )
    assert "pw" not in repr(settings)
