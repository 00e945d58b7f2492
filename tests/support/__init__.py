"""Helpers shared by the test suites: running agents, MCP servers and A2A clients, model clients, strategies."""
