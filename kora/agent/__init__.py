"""The agent server (``kora agent``): chat completions, A2A, tools, memory and probes over HTTP.

``create_app(settings)`` in ``kora.agent.app`` builds the FastAPI application; ``kora.agent.cli``
runs it with uvicorn. Settings come from the environment (``kora.agent.settings``).
"""
