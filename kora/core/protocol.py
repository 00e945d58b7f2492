"""Names Kora's workloads agree on over the wire, beyond the standard protocols (delegation headers,
event metadata), and the rule every session id follows.

Shared by the agent server (which reads them), delegation (which sends them) and memory replay (which pairs
delegation events), so that no two places can spell one differently.

Session ids: 1-128 characters from ``A-Z a-z 0-9 . _ : -`` (:data:`SESSION_ID_PATTERN`), wherever one enters
an agent (the ``X-Session-ID`` header, a chat body's ``session_id``, an A2A message's ``contextId`` or a legacy
``sessionId``, ``GET /memory/events?session_id=``). Anything else is refused with a 400 (JSON-RPC -32602) before
any work, so an id is always safe to echo in a header, a log line or a URL path.
"""

from __future__ import annotations

import hashlib
import re

from kora.core.errors import RequestError

#: Request and response header naming the memory session of a chat turn.
SESSION_HEADER = "X-Session-ID"
#: Set by a parent agent on a delegated request; its value is the parent agent's name.
DELEGATED_BY_HEADER = "X-Kora-Delegated-By"
#: Kora's extension field marking a call that waits for a person's approval in a Chat Completions ``tool_calls``
#: entry and a Responses ``function_call`` item: ``{"id", "target", "expires_at"}`` (docs/approvals.md).
APPROVAL_FIELD = "kora_approval"
#: A2A message metadata key naming the parent agent of a delegated task.
DELEGATED_BY_METADATA = "kora.delegated_by"
#: Name prefix of the delegation tools the agent offers the model: ``delegate_to_<agent>``.
DELEGATION_TOOL_PREFIX = "delegate_to_"
#: The single argument of a delegation tool: the task text sent to the peer agent.
DELEGATION_TASK_ARG = "task"

#: Longest session id, in characters.
MAX_SESSION_ID_CHARS = 128
#: Every session id matches this whole (Python ``re`` syntax).
SESSION_ID_PATTERN = r"[A-Za-z0-9._:-]{1,128}"
_SESSION_ID = re.compile(SESSION_ID_PATTERN)
_NOT_SESSION_CHARS = re.compile(r"[^A-Za-z0-9._:-]+")
#: What a refused session id is told (after the name of the field that carried it).
SESSION_ID_RULE = "must be 1-128 characters from A-Z, a-z, 0-9, '.', '_', ':' and '-'"


def is_session_id(value: object) -> bool:
    """True when ``value`` is a string following the session id rule."""
    return isinstance(value, str) and _SESSION_ID.fullmatch(value) is not None


def check_session_id(value: object, where: str) -> str:
    """``value`` when it is a valid session id; :class:`~kora.core.errors.RequestError` (400, JSON-RPC -32602)
    naming ``where`` (e.g. ``"X-Session-ID"``) otherwise. The refused value is never echoed."""
    if not is_session_id(value):
        raise RequestError(f"Invalid request: {where} {SESSION_ID_RULE}.", code="invalid_session_id")
    assert isinstance(value, str)
    return value


def child_session_id(parent: str, agent_name: str) -> str:
    """The session a delegated task continues at peer ``agent_name``: ``<parent>.<agent_name>``, a valid
    session id whatever the parent's length or the name's characters (a parent too long for the suffix is
    replaced by 40 hex characters of its SHA-256, so one parent always maps to one child)."""
    name = _NOT_SESSION_CHARS.sub("-", agent_name)[:63] or "agent"
    child = f"{parent}.{name}"
    if len(child) <= MAX_SESSION_ID_CHARS:
        return child
    return f"{hashlib.sha256(parent.encode('utf-8', 'surrogatepass')).hexdigest()[:40]}.{name}"
