"""The agent's A2A paths, known before the a2a-sdk loads (this module imports nothing of it)."""

#: Paths the card is served at: A2A 0.3's, the SDK's default, and the one the gateway example uses.
CARD_PATHS = ("/.well-known/agent.json", "/.well-known/agent-card.json", "/.well-known/agent")
#: The JSON-RPC binding's one path.
JSONRPC_PATH = "/"
#: The first segments of every path of the HTTP+JSON binding (:mod:`kora.agent.a2a.rest`).
REST_PREFIXES = ("/message:", "/tasks", "/extendedAgentCard")


def is_rest_path(path: str) -> bool:
    """True when ``path`` is one of the HTTP+JSON binding's (or would be, but for a wrong id or method)."""
    return path.startswith(REST_PREFIXES)
