"""Kora: a Kubernetes-native runtime for AI agents.

Components live in their own packages (see docs/architecture.md):

- ``kora.agent``: the agent server (``kora agent``).
- ``kora.memory``: agent-side memory clients (LocalMemory, NullMemory, RemoteMemory).
- ``kora.mcp``: the python-runtime MCP tool server (``kora mcp``).
- ``kora.resources``: resource models (Agent, ModelAPI, MCPServer, MemoryStore) and wiring.
- ``kora.local``: the local runtime (``kora up``).
- ``kora.scripted``: the scripted OpenAI-compatible model used by tests and the offline demo.
- ``kora.proxy``: HTTP forwarding (the local gateway, ``kora model-proxy``).
- ``kora.operator``: the Kubernetes operator (``kora operator``) and its Helm chart's settings.
- ``kora.hosted``: ModelAPI Hosted mode (``kora model-hosted``): all-MiniLM-L6-v2 embeddings in-process.
- ``kora.core``: concepts shared by every component (event types, errors, wire formats, environment-variable
  names, telemetry).

Importing ``kora`` is cheap on purpose: heavy libraries load only in the component that needs them.
"""

__version__ = "0.1.0"
