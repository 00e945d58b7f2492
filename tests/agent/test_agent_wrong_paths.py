"""Paths a client gets wrong on a real agent: an OpenAI client without /v1 in its base_url is told so in OpenAI's
error shape, and a method /v1 does not route is a 405 with its own code."""

import httpx
import openai
import pytest

from tests.support.agent import running_agent

pytestmark = pytest.mark.integration


async def test_an_openai_client_without_v1_is_told_where_the_api_is(model):
    async with running_agent(model) as agent:
        client = openai.OpenAI(base_url=agent.url, api_key="k", max_retries=0)  # no /v1
        with pytest.raises(openai.NotFoundError) as raised:
            client.chat.completions.create(model="a", messages=[{"role": "user", "content": "hi"}])
        error = raised.value.body
        assert isinstance(error, dict)
        assert error["code"] == "missing_v1"
        assert error["message"] == (
            "No route POST /chat/completions: the OpenAI-compatible API is under /v1 (POST /v1/chat/completions); "
            "an OpenAI client's base_url must end in /v1."
        )
        # A path that is not the API's stays a plain 404; a method /v1 does not route is a 405.
        assert httpx.get(f"{agent.url}/nothing").json() == {"detail": "Not Found"}
        wrong = httpx.delete(f"{agent.url}/v1/chat/completions")
        assert wrong.status_code == 405
        assert wrong.json()["error"]["code"] == "method_not_allowed"
