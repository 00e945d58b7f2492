"""Names Kora's workloads agree on over the wire, beyond the standard protocols (spec: "Agent server settings"
rules 1-2, "Events" rule 3).

Shared by the agent server (which reads them), delegation (which sends them) and memory replay (which pairs
delegation events), so that no two places can spell one differently.
"""

from __future__ import annotations

#: Request and response header naming the memory session of a chat turn.
SESSION_HEADER = "X-Session-ID"
#: Set by a parent agent on a delegated request; its value is the parent agent's name.
DELEGATED_BY_HEADER = "X-Kora-Delegated-By"
#: A2A message metadata key naming the parent agent of a delegated task.
DELEGATED_BY_METADATA = "kora.delegated_by"
#: Name prefix of the delegation tools the agent offers the model: ``delegate_to_<agent>``.
DELEGATION_TOOL_PREFIX = "delegate_to_"
#: The single argument of a delegation tool: the task text sent to the peer agent.
DELEGATION_TASK_ARG = "task"
