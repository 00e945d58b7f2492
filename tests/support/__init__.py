"""Helpers shared by the test suites: in-process servers (scripted model, agents, MCP servers), A2A clients,
hypothesis strategies of conversations."""
