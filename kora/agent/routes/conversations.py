"""``/v1/conversations``: OpenAI's Conversations API over Kora sessions (:mod:`kora.agent.conversations_api` has
the mapping of items to events).

========================================================  ==========================================================
``POST /v1/conversations``                                create (``items``: up to 20, ``metadata``) -> conversation
``GET /v1/conversations/{id}``                            the conversation
``POST /v1/conversations/{id}``                           replace its ``metadata`` -> conversation
``DELETE /v1/conversations/{id}``                         erase its session -> ``conversation.deleted``
``GET /v1/conversations/{id}/items``                      its items (``after``, ``limit``, ``order``)
``POST /v1/conversations/{id}/items``                     add ``items`` (up to 20) -> the list of the added items
                                                          (409 ``approval_pending`` while a turn of it waits)
``GET /v1/conversations/{id}/items/{item_id}``            one item
``DELETE /v1/conversations/{id}/items/{item_id}``         refused (400): a session's events are erased together
========================================================  ==========================================================

A conversation id is a session id, so a conversation created here is continued by ``POST /v1/responses`` with
``conversation`` (and a session a turn started is a conversation here). Who may use a conversation is who may use
its session (:meth:`kora.memory.Memory.check_reader`): a verified user's is theirs alone (403
``session_forbidden`` for anyone else), one started anonymously is anyone's who knows its id. An id that names no
session (or breaks the session id rule) is a 404 ``conversation_not_found``, an item the conversation does not
hold a 404 ``item_not_found``. ``metadata`` is kept with the session (the agent's own memory, or the memory
service); a memory that keeps none refuses a non-empty one (400), and with memory disabled conversations are
refused (400 ``memory_disabled``). A refused request stores nothing.
"""

from __future__ import annotations

import uuid

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from kora.agent.conversations_api import (
    conversation,
    conversation_item,
    conversation_items,
    create_body,
    item_events,
    item_id,
    items_body,
    update_body,
)
from kora.agent.identity import open_session
from kora.agent.openai_api import decode_body
from kora.agent.responses_api import item_page
from kora.agent.routes.queries import INCLUDE_PARAMS, PAGE_PARAMS, page, refuse_include, refuse_query
from kora.agent.state import AgentState
from kora.core.errors import NotFound, RequestError
from kora.core.protocol import is_session_id
from kora.memory import SessionInfo


def add_conversation_routes(router: APIRouter, state: AgentState) -> None:
    """Add the ``/v1/conversations`` routes (module docstring) to ``router``, serving ``state``'s memory."""
    memory = state.memory
    agent_name = state.settings.agent_name

    def check_memory() -> None:
        if not memory.enabled:
            raise RequestError(
                "Conversations are not kept: this agent's memory is disabled (MEMORY_ENABLED=false).",
                code="memory_disabled",
            )

    def check_metadata(metadata: dict[str, str]) -> None:
        if metadata and not memory.keeps_session_metadata:
            raise RequestError(
                "Unsupported value: 'metadata' is not kept by this agent's memory; leave it empty.",
                code="unsupported_value",
                param="metadata",
            )

    async def held(request: Request, conversation_id: str, served: frozenset[str] = frozenset()) -> SessionInfo:
        """The session of ``conversation_id`` once the caller may use it (403 for another user's; 404 for none)."""
        refuse_query(request, served)
        check_memory()
        identity = await state.identity.resolve(request.headers)
        if not is_session_id(conversation_id):
            raise _not_found(conversation_id)
        await memory.check_reader(conversation_id, identity.user_id)
        info = await memory.session_info(conversation_id)
        if info is None:
            raise _not_found(conversation_id)
        return info

    async def shown(info: SessionInfo) -> JSONResponse:
        return JSONResponse(
            conversation(info.session_id, info.created_at, await memory.session_metadata(info.session_id))
        )

    @router.post("/v1/conversations")
    async def create_conversation(request: Request) -> Response:
        refuse_query(request)
        check_memory()
        identity = await state.identity.resolve(request.headers)
        items, metadata = create_body(decode_body(await request.body()))
        check_metadata(metadata)
        events = item_events(items, [])
        session_id = await open_session(memory, new_conversation_id(), agent_name, identity)
        if memory.keeps_session_metadata:  # also makes a store create the session now, not with its first write
            await memory.set_session_metadata(session_id, metadata, identity.user_id)
        if events:
            await memory.add_events(session_id, events)
        info = await memory.session_info(session_id)
        assert info is not None  # just opened: the newest session is never the one evicted
        return await shown(info)

    @router.get("/v1/conversations/{conversation_id}")
    async def retrieve_conversation(request: Request, conversation_id: str) -> Response:
        return await shown(await held(request, conversation_id))

    @router.post("/v1/conversations/{conversation_id}")
    async def update_conversation(request: Request, conversation_id: str) -> Response:
        info = await held(request, conversation_id)
        metadata = update_body(decode_body(await request.body()))
        check_metadata(metadata)
        if memory.keeps_session_metadata:
            user_id = (await state.identity.resolve(request.headers)).user_id
            await memory.set_session_metadata(conversation_id, metadata, user_id)
        return await shown(info)

    @router.delete("/v1/conversations/{conversation_id}")
    async def delete_conversation(request: Request, conversation_id: str) -> Response:
        await held(request, conversation_id)
        await state.forget_session(conversation_id)
        await memory.erase_session(conversation_id)
        return JSONResponse({"id": conversation_id, "object": "conversation.deleted", "deleted": True})

    @router.get("/v1/conversations/{conversation_id}/items")
    async def list_items(request: Request, conversation_id: str) -> Response:
        await held(request, conversation_id, PAGE_PARAMS | INCLUDE_PARAMS)
        refuse_include(request)
        return JSONResponse(page(request, conversation_items(await memory.get_session_events(conversation_id))))

    @router.post("/v1/conversations/{conversation_id}/items")
    async def create_items(request: Request, conversation_id: str) -> Response:
        await held(request, conversation_id, INCLUDE_PARAMS)
        refuse_include(request)
        if state.runtime is not None:  # items added beside a turn waiting for approvals would end up in its history
            await state.runtime.refuse_waiting(conversation_id)
        items = items_body(decode_body(await request.body()))
        events = item_events(items, await memory.get_session_events(conversation_id))
        await memory.add_events(conversation_id, events)
        added = [item for event in events if (item := conversation_item(event)) is not None]
        return JSONResponse(item_page(added, None, len(added), "asc"))

    @router.get("/v1/conversations/{conversation_id}/items/{item}")
    async def retrieve_item(request: Request, conversation_id: str, item: str) -> Response:
        await held(request, conversation_id, INCLUDE_PARAMS)
        refuse_include(request)
        for event in await memory.get_session_events(conversation_id):
            if item_id(event) == item and (found := conversation_item(event)) is not None:
                return JSONResponse(found)
        raise _item_not_found(item)

    @router.delete("/v1/conversations/{conversation_id}/items/{item}")
    async def delete_item(request: Request, conversation_id: str, item: str) -> Response:
        await held(request, conversation_id)
        events = await memory.get_session_events(conversation_id)
        if not any(item_id(event) == item and conversation_item(event) is not None for event in events):
            raise _item_not_found(item)
        # A session's events are erased together, from every tier (the memory service folds them into a rolling
        # summary and extracts facts from them): one event cannot be taken out cleanly, so none is.
        raise RequestError(
            f"Cannot delete item '{item}' alone: a conversation's items are its session's events, which are erased "
            "together (DELETE the conversation to erase them).",
            code="unsupported_value",
        )


def new_conversation_id() -> str:
    """A fresh conversation (session) id: ``conv_`` followed by 32 hex digits, as OpenAI's look."""
    return f"conv_{uuid.uuid4().hex}"


def _not_found(conversation_id: str) -> NotFound:
    """404 for a conversation not held (an id that cannot be one is not echoed)."""
    named = f" with id '{conversation_id}'" if is_session_id(conversation_id) else ""
    return NotFound(f"Conversation{named} not found.", code="conversation_not_found")


def _item_not_found(item: str) -> NotFound:
    """404 for an item the conversation does not hold (an id that cannot be one is not echoed)."""
    named = f" with id '{item}'" if is_session_id(item) else ""
    return NotFound(f"Item{named} not found.", code="item_not_found")
