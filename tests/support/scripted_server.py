"""Running a scripted model over real HTTP inside the current process, for tests.

:class:`ScriptedModelServer` serves a :class:`~kora.scripted.model.ScriptedModel` with uvicorn
on ``127.0.0.1`` and a free port, in a background thread with its own event loop, so neither sync nor
async tests block it. Use it as ``with`` or ``async with``::

    async with ScriptedModelServer() as server:
        server.enqueue(TextReply("hello"))
        client = server.async_openai_client()
        await client.chat.completions.create(model=server.model_name, messages=[...])
        assert server.requests[-1]["messages"][-1]["content"] == ...
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kora.core.openai_wire.embeddings import MAX_INPUT_CHARS
from kora.scripted.embedding import DEFAULT_DIMENSIONS
from kora.scripted.model import DEFAULT_MODEL_NAME, ScriptedModel, create_app
from kora.scripted.script import JSONObject, Reply, Rule
from tests.support.threaded import ThreadedServer

if TYPE_CHECKING:  # imported lazily at run time: only tests that use them pay for them
    import openai
    from pydantic_ai.models.openai import OpenAIChatModel

__all__ = ["ScriptedModelServer"]

API_KEY = "scripted"  # any non-empty key: the scripted model does not check it


class ScriptedModelServer(ThreadedServer):
    """A scripted model served over HTTP from a background thread (sync and async context manager).

    ``model`` is the :class:`ScriptedModel` to serve (a new one named ``model_name``, with embedding
    vectors of ``embedding_dimensions`` floats, if ``None``).
    After :meth:`start`: :attr:`url` is the OpenAI base URL (``http://127.0.0.1:<port>/v1``),
    :attr:`root_url` the same without ``/v1`` (control endpoints, ``/health``). :meth:`start` raises
    ``RuntimeError`` if the server does not come up within ``startup_timeout`` seconds.
    """

    def __init__(
        self,
        model: ScriptedModel | None = None,
        *,
        model_name: str = DEFAULT_MODEL_NAME,
        embedding_dimensions: int = DEFAULT_DIMENSIONS,
        embedding_max_chars: int = MAX_INPUT_CHARS,
        host: str = "127.0.0.1",
        startup_timeout: float = 10.0,
    ) -> None:
        if model is None:
            model = ScriptedModel(
                model_name=model_name,
                embedding_dimensions=embedding_dimensions,
                embedding_max_chars=embedding_max_chars,
            )
        self.model = model
        # lifespan off: the scripted model's app has none.
        super().__init__(
            create_app(self.model), name="scripted-model", host=host, lifespan="off", startup_timeout=startup_timeout
        )

    @property
    def url(self) -> str:
        """The base URL an OpenAI client wants: ``http://host:port/v1``."""
        return f"{self.root_url}/v1"

    # -- the script --------------------------------------------------------------------------------

    @property
    def model_name(self) -> str:
        """The model's configured name (what clients should pass as ``model``)."""
        return self.model.model_name

    @property
    def requests(self) -> list[JSONObject]:
        """Recorded request bodies, in arrival order (the model's live list)."""
        return self.model.requests

    @property
    def aborted_requests(self) -> list[JSONObject]:
        """Bodies of requests whose client disconnected before the reply finished."""
        return self.model.aborted_requests

    @property
    def embedding_requests(self) -> list[object]:
        """Recorded ``/v1/embeddings`` request bodies, in arrival order (the model's live list)."""
        return self.model.embedding_requests

    def enqueue(self, *replies: Reply | str) -> None:
        """Queue replies for the next requests (see :meth:`ScriptedModel.enqueue`)."""
        self.model.enqueue(*replies)

    def load_script(self, rules: list[Rule]) -> None:
        """Replace the rules (see :meth:`ScriptedModel.load_script`)."""
        self.model.load_script(rules)

    def load_script_file(self, path: str | Path) -> None:
        """Replace the rules with a YAML/JSON script file's (see :func:`load_script_file`)."""
        self.model.load_script_file(path)

    def reset(self, *, keep_rules: bool = False) -> None:
        """Forget queue, records and (unless ``keep_rules``) rules."""
        self.model.reset(keep_rules=keep_rules)

    async def wait_for_aborts(self, count: int = 1, within: float = 5.0) -> bool:
        """Wait up to ``within`` seconds, without blocking the event loop, until ``count`` aborted
        requests were seen; ``False`` if they were not."""
        return await asyncio.to_thread(self.model.wait_for_aborts, count, within)

    # -- clients -----------------------------------------------------------------------------------

    def openai_client(self, **kwargs: Any) -> openai.OpenAI:
        """A sync ``openai.OpenAI`` client for this server; ``kwargs`` go to its constructor."""
        import openai

        return openai.OpenAI(base_url=self.url, api_key=API_KEY, **kwargs)

    def async_openai_client(self, **kwargs: Any) -> openai.AsyncOpenAI:
        """An ``openai.AsyncOpenAI`` client for this server; ``kwargs`` go to its constructor."""
        import openai

        return openai.AsyncOpenAI(base_url=self.url, api_key=API_KEY, **kwargs)

    def pydantic_ai_model(self) -> OpenAIChatModel:
        """A pydantic-ai ``OpenAIChatModel`` for this server, with strict tool schemas turned off
        (the way Kora talks to OpenAI-compatible backends)."""
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.profiles.openai import OpenAIModelProfile
        from pydantic_ai.providers.openai import OpenAIProvider

        return OpenAIChatModel(
            self.model_name,
            provider=OpenAIProvider(base_url=self.url, api_key=API_KEY),
            profile=OpenAIModelProfile(openai_supports_strict_tool_definition=False),
        )
