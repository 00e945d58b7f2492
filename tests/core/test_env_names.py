"""Environment-variable naming shared by the agent (reader) and the operator/local runtime (writers)."""

import pytest

from kora.core import env

pytestmark = pytest.mark.unit


def test_names_are_upper_case_with_hyphens_as_underscores():
    assert env.mcp_server_url_var("web-search") == "MCP_SERVER_WEB_SEARCH_URL"
    assert env.peer_agent_card_url_var("research-bot") == "PEER_AGENT_RESEARCH_BOT_CARD_URL"


def test_mcp_path_is_appended_once():
    assert env.mcp_endpoint("http://t:8000") == "http://t:8000/mcp"
    assert env.mcp_endpoint("http://t:8000/") == "http://t:8000/mcp"
    assert env.mcp_endpoint("http://gw/ns/mcp/t/mcp") == "http://gw/ns/mcp/t/mcp"


def test_split_names_drops_blanks():
    assert env.split_names(" a, b,,c ,") == ["a", "b", "c"]
    assert env.split_names("") == []
