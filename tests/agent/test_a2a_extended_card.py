"""A2A's authenticated extended agent card (``GetExtendedAgentCard``, 0.3 ``agent/getAuthenticatedExtendedCard``)
with the official a2a-sdk client against a running agent: offered only when the agent verifies users, served only
to a verified user, a JSON-RPC error otherwise."""

from __future__ import annotations

import httpx
import pytest
from a2a.client.errors import A2AClientError
from a2a.types.a2a_pb2 import GetExtendedAgentCardRequest
from a2a.utils.errors import ExtendedAgentCardNotConfiguredError, UnsupportedOperationError

from tests.support.a2a import rpc_body, sdk_client
from tests.support.agent import running_agent
from tests.support.identity import identity_provider

pytestmark = pytest.mark.integration

HEADER = "X-Forwarded-User"
V1 = {"A2A-Version": "1.0"}


@pytest.fixture(params=["1.0", "0.3"])
def protocol(request: pytest.FixtureRequest) -> str:
    """The A2A version the SDK client speaks (the card offers both)."""
    return str(request.param)


def method_of(protocol: str) -> tuple[str, dict[str, str]]:
    """The extended card's method name in ``protocol`` and the headers that ask for that version."""
    return ("GetExtendedAgentCard", V1) if protocol == "1.0" else ("agent/getAuthenticatedExtendedCard", {})


async def test_without_verified_users_the_card_offers_no_extended_card_and_asking_is_unsupported(model, protocol):
    async with running_agent(model) as agent:
        card = agent.get("/.well-known/agent-card.json").json()
        assert "extendedAgentCard" not in card["capabilities"]
        assert "supportsAuthenticatedExtendedCard" not in card
        assert "securitySchemes" not in card
        method, headers = method_of(protocol)
        answer = httpx.post(f"{agent.url}/", json=rpc_body(method, {}), headers=headers, timeout=10).json()
        assert answer["id"] == 1
        # The SDK's answer: the operation is not supported (-32004), as the card says.
        assert answer["error"]["code"] == -32004
        assert "extended" in answer["error"]["message"]
        if protocol == "1.0":
            assert answer["error"]["data"][0]["reason"] == "UNSUPPORTED_OPERATION"
        # The SDK client reads the card and, seeing no extended card, keeps the public one without asking.
        client = await sdk_client(agent.url, version=protocol)
        assert (await client.get_extended_agent_card(GetExtendedAgentCardRequest())).name == "agent"
        await client.close()


async def test_a_verified_user_gets_the_extended_card_at_the_url_they_reached(model, protocol):
    async with running_agent(model, name="writer", AUTH_TRUSTED_USER_HEADER=HEADER) as agent:
        card = agent.get("/.well-known/agent-card.json").json()
        assert card["capabilities"]["extendedAgentCard"] is True
        assert card["supportsAuthenticatedExtendedCard"] is True
        # Identity stays optional: no scheme is required of every caller.
        assert "securityRequirements" not in card
        assert "security" not in card
        async with httpx.AsyncClient(timeout=30, headers={HEADER: "alice"}) as http:
            client = await sdk_client(agent.url, http=http, version=protocol)
            extended = await client.get_extended_agent_card(GetExtendedAgentCardRequest())
            assert extended.name == "writer"
            assert extended.capabilities.extended_agent_card
            assert [s.id for s in extended.skills] == ["chat"]
            assert {interface.url.rstrip("/") for interface in extended.supported_interfaces} == {agent.url}
            await client.close()
        # Behind a gateway, the extended card's URLs are the gateway's, as the public card's are.
        method, headers = method_of(protocol)
        forwarded = {HEADER: "alice", "X-Forwarded-Host": "gw.example.com", "X-Forwarded-Prefix": "/team/agent/writer"}
        answer = httpx.post(f"{agent.url}/", json=rpc_body(method, {}), headers=headers | forwarded, timeout=10).json()
        result = answer["result"]
        # 1.0 names URLs in its interfaces, 0.3 in ``url`` (and its additional interfaces).
        urls = {i["url"] for i in result.get("supportedInterfaces", result.get("additionalInterfaces", []))}
        urls |= {result["url"]} if "url" in result else set()
        assert {url.rstrip("/") for url in urls} == {"http://gw.example.com/team/agent/writer"}


async def test_an_anonymous_caller_is_refused_the_extended_card_with_a_json_rpc_error(model, protocol):
    async with running_agent(model, AUTH_TRUSTED_USER_HEADER=HEADER) as agent:
        method, headers = method_of(protocol)
        response = httpx.post(f"{agent.url}/", json=rpc_body(method, {}, id_="x"), headers=headers, timeout=10)
        assert response.status_code == 200
        error = response.json()["error"]
        assert response.json()["id"] == "x"
        assert error["code"] == -32000
        assert "verified users" in error["message"]
        if protocol == "1.0":
            assert error["data"][0]["metadata"] == {"type": "authentication_required"}
        else:
            assert error["data"] == {"type": "authentication_required"}
        client = await sdk_client(agent.url, version=protocol)
        with pytest.raises(A2AClientError) as raised:
            await client.get_extended_agent_card(GetExtendedAgentCardRequest())
        assert not isinstance(raised.value, ExtendedAgentCardNotConfiguredError | UnsupportedOperationError)
        await client.close()


async def test_with_tokens_the_card_names_the_bearer_scheme_and_a_token_gets_the_extended_card(model):
    async with identity_provider() as idp, running_agent(model, **idp.agent_env()) as agent:
        card = agent.get("/.well-known/agent-card.json").json()
        bearer = card["securitySchemes"]["bearer"]  # 1.0's scheme, with 0.3's fields (``type``) beside it
        assert bearer["httpAuthSecurityScheme"] == {
            "scheme": "Bearer",
            "bearerFormat": "JWT",
            "description": "A user's token; without one the caller is anonymous.",
        }
        assert list(card["securitySchemes"]) == ["bearer"]
        headers = {"Authorization": f"Bearer {idp.keys.token('bob')}"}
        async with httpx.AsyncClient(timeout=30, headers=headers) as http:
            client = await sdk_client(agent.url, http=http, version="1.0")
            extended = await client.get_extended_agent_card(GetExtendedAgentCardRequest())
            assert extended.name == "agent"
            await client.close()
        bad = httpx.post(
            f"{agent.url}/",
            json=rpc_body("GetExtendedAgentCard", {}),
            headers=V1 | {"Authorization": "Bearer not-a-token"},
            timeout=10,
        )
        assert bad.status_code == 401
        assert bad.json()["error"]["code"] == -32000
