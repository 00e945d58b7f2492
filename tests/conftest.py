import pytest

from kora.testing import ScriptedModelServer


@pytest.fixture
async def model():
    """A scripted OpenAI-compatible model on 127.0.0.1 (the only stand-in allowed: the LLM)."""
    async with ScriptedModelServer() as server:
        yield server
