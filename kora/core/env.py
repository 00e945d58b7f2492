"""Names of the environment variables that wire workloads together (spec: "Agent server settings").

The operator and the local runtime *write* these variables; the agent server *reads* them. Both sides
import the helpers here so the names can never drift apart.
"""

from __future__ import annotations

MCP_SERVERS = "MCP_SERVERS"
PEER_AGENTS = "PEER_AGENTS"
AGENT_SUB_AGENTS = "AGENT_SUB_AGENTS"
MODEL_API_URL = "MODEL_API_URL"
MODEL_NAME = "MODEL_NAME"
MEMORY_STORE_ENDPOINT = "MEMORY_STORE_ENDPOINT"
OTEL_EXPORTER_OTLP_ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
OTEL_SERVICE_NAME = "OTEL_SERVICE_NAME"

#: Path appended to a tool server's base URL: the Streamable HTTP endpoint (spec rule 3).
MCP_PATH = "/mcp"


def env_key(name: str) -> str:
    """The ``<NAME>`` part of a per-resource variable: upper case, hyphens and dots as underscores.

    >>> env_key("web-search")
    'WEB_SEARCH'
    """
    return name.upper().replace("-", "_").replace(".", "_")


def mcp_server_url_var(name: str) -> str:
    """``MCP_SERVER_<NAME>_URL``: the variable holding tool server ``name``'s base URL."""
    return f"MCP_SERVER_{env_key(name)}_URL"


def peer_agent_card_url_var(name: str) -> str:
    """``PEER_AGENT_<NAME>_CARD_URL``: the variable holding peer agent ``name``'s base URL."""
    return f"PEER_AGENT_{env_key(name)}_CARD_URL"


def mcp_endpoint(base_url: str) -> str:
    """The Streamable HTTP endpoint of a tool server: its base URL with ``/mcp`` appended once."""
    base = base_url.rstrip("/")
    return base if base.endswith(MCP_PATH) else base + MCP_PATH


def split_names(value: str) -> list[str]:
    """Split a comma-separated list, dropping blanks and surrounding spaces: ``"a, b,,"`` -> ``["a", "b"]``."""
    return [part.strip() for part in value.split(",") if part.strip()]
