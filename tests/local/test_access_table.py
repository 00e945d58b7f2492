"""docs/identity.md's access tables, walked row by row against every route they name: a real agent bound to the
real memory service on a real Postgres, called directly and through ``kora up``'s gateway (its proxy app, with a
route to the agent and one to the store as ``spec.gatewayRoute.enabled`` gives it). ``tests/e2e`` walks them once
more through a real ``kora up``.

The expected answers are read from the document itself, so the document cannot drift from what the servers do.
"""

from __future__ import annotations

import pytest

from kora.local.gateway import GatewayRoute, create_gateway_app
from tests.support.access import APP, USER, agent_callers, store_callers, walk_agent_table, walk_store_table
from tests.support.agent import OPERATOR_TOKEN, running_agent
from tests.support.memory import ADMIN_TOKEN, AGENT_TOKEN, memory_service, service_env
from tests.support.scripted_server import ScriptedModelServer
from tests.support.threaded import ThreadedServer

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("via", ["direct", "gateway"])
async def test_every_row_of_the_access_tables_against_every_route(
    memory_db: str, model: ScriptedModelServer, via: str
) -> None:
    async with (
        memory_service(service_env(memory_db)) as store,
        running_agent(model, APP, MEMORY_STORE_ENDPOINT=store, AUTH_TRUSTED_USER_HEADER=USER) as agent,
    ):
        routes = {
            "/default/agent/assistant": GatewayRoute("/default/agent/assistant", agent.url, 60.0),
            "/default/memorystore/memory": GatewayRoute("/default/memorystore/memory", store, 60.0),
        }
        async with ThreadedServer(create_gateway_app(routes), name="gateway", lifespan="on") as gateway:
            if via == "gateway":
                agent_base = f"{gateway.root_url}/default/agent/assistant"
                store_base = f"{gateway.root_url}/default/memorystore/memory"
            else:
                agent_base, store_base = agent.url, store
            walk_agent_table(agent_base, agent_callers(OPERATOR_TOKEN, AGENT_TOKEN))
            walk_store_table(store_base, store_callers(ADMIN_TOKEN, AGENT_TOKEN))
