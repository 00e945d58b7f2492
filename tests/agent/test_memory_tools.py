"""The memory tools' read levels: KAOS's scopes, narrowest first, up to the agent's MEMORY_MAX_READ_SCOPE."""

import pytest

from kora.agent.memory_tools import READ_SCOPES, memory_toolset, read_levels
from kora.memory import LocalMemory

pytestmark = pytest.mark.unit


def test_read_scopes_are_kaos_names_narrowest_first_without_the_administrators_scope():
    assert READ_SCOPES == ("session", "agent", "user")


@pytest.mark.parametrize(
    ("ceiling", "levels"),
    [("session", ["session"]), ("agent", ["session", "agent"]), ("user", ["session", "agent", "user"])],
)
def test_search_memory_offers_the_levels_up_to_the_ceiling(ceiling, levels):
    assert read_levels(ceiling) == levels
    toolset = memory_toolset(LocalMemory(), "read", ceiling)
    assert toolset is not None
    schema = toolset.tools["search_memory"].function_schema.json_schema
    assert schema["properties"]["level"]["enum"] == levels
    assert "store" not in schema["properties"]["level"]["enum"]
