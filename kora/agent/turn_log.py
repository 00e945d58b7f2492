"""One INFO line per turn on the ``kora.agent.turn`` logger: what ``kora logs <agent>`` (and a pod's log) shows of
each conversation step, whatever the access log setting.

    turn session=3f2a... steps=2 tools=add tokens=41+9 ms=312 finish=stop

``session`` the session id; ``steps`` the model requests the turn made; ``tools`` the tools the model called, in
order, comma-separated (``-`` for none; delegations appear as ``delegate_to_<peer>``); ``tokens`` input+output
tokens as the model reported them, summed over the turn; ``ms`` the turn's time from its prompt to its end, in
milliseconds; ``finish`` ``stop``, ``length`` (the step budget ran out), ``cancelled``, or the error's code
(``model_error``, ``model_timeout``, ...). A delegated turn adds ``delegated_by=<agent>``. Neither the prompt, the
answer nor the user id is logged: they are the user's data.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
from pydantic_ai.usage import RunUsage

from kora.agent.turn import TurnRequest
from kora.core.events import utc_now

__all__ = ["log_turn", "tools_called"]

log = logging.getLogger("kora.agent.turn")


def tools_called(messages: Iterable[ModelMessage]) -> list[str]:
    """The names of the tools the model called in ``messages``, in order (a tool called twice appears twice)."""
    return [
        part.tool_name
        for message in messages
        if isinstance(message, ModelResponse)
        for part in message.parts
        if isinstance(part, ToolCallPart)
    ]


def log_turn(turn: TurnRequest, messages: Iterable[ModelMessage], usage: RunUsage, finish: str) -> None:
    """Write ``turn``'s line (see the module docstring): ``messages`` are the turn's, from its prompt request on;
    ``usage`` what its model requests spent; ``finish`` how it ended. Nothing is computed when INFO is off."""
    if not log.isEnabledFor(logging.INFO):
        return
    milliseconds = (utc_now() - turn.started).total_seconds() * 1000
    tools = ",".join(tools_called(messages)) or "-"
    delegated = f" delegated_by={turn.delegated_by}" if turn.delegated_by else ""
    log.info(
        "turn session=%s steps=%d tools=%s tokens=%d+%d ms=%.0f finish=%s%s",
        turn.session_id,
        usage.requests,
        tools,
        usage.input_tokens,
        usage.output_tokens,
        milliseconds,
        finish,
        delegated,
    )
