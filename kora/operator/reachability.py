"""Whether an Agent's pods reach their memory store, as the agents themselves say on ``/ready``.

``MemoryDegraded`` is reported when the bound MemoryStore is not Ready *or the memory
service is unreachable*. Only the agent knows the second: a RemoteMemory that cannot reach its store says so on
``/ready`` (soft mode: 200 with ``details.memory`` ``"degraded: <why>; ..."``; strict mode: 503 with a reason
``"memory store unreachable: <why>"``). The operator asks each running pod of every Agent bound to a MemoryStore
(its pod IP and ``http`` container port: the workloads' NetworkPolicies admit the operator's namespace) every
``AGENT_MEMORY_PROBE_SECONDS`` and turns the answers into the condition (:mod:`kora.operator.status`).

A pod that does not answer says nothing (it may be starting or going); its phase and readiness are the
Deployment's business, not this probe's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import httpx

#: Prefix of ``details.memory`` on a soft-mode agent that cannot reach its store.
SOFT_PREFIX = "degraded: "
#: Prefix of the ``/ready`` reason of a strict-mode agent that cannot reach its store.
STRICT_PREFIX = "memory store unreachable: "
#: Seconds one ``/ready`` request may take before the pod is taken as not answering.
PROBE_TIMEOUT_SECONDS = 5.0


@dataclass(frozen=True)
class Reach:
    """What an Agent's pods said: ``answered`` how many answered ``/ready``; ``unreachable`` why one of them cannot
    reach its store (None: every pod that answered reaches it)."""

    answered: int
    unreachable: str | None


def memory_problem(body: object) -> str | None:
    """Why the agent whose ``/ready`` answered ``body`` (JSON) cannot reach its memory store; None when it does
    not say so. The reason is the agent's own text after the prefix, soft mode's up to its first ``;``."""
    if not isinstance(body, Mapping):
        return None
    details = body.get("details")
    memory = details.get("memory") if isinstance(details, Mapping) else None
    if isinstance(memory, str) and memory.startswith(SOFT_PREFIX):
        return memory.removeprefix(SOFT_PREFIX).split(";", 1)[0].strip() or "unreachable"
    reasons = body.get("reasons")
    for reason in reasons if isinstance(reasons, list) else []:
        if isinstance(reason, str) and reason.startswith(STRICT_PREFIX):
            return reason.removeprefix(STRICT_PREFIX).strip() or "unreachable"
    return None


def pod_address(pod: Mapping[str, object]) -> str | None:
    """``http://<podIP>:<port>`` of a running pod (``port``: its first container's ``http`` port, else its first
    port); None while it has no IP, is not running or has no port."""
    status = pod.get("status")
    spec = pod.get("spec")
    if not isinstance(status, Mapping) or not isinstance(spec, Mapping) or status.get("phase") != "Running":
        return None
    ip = status.get("podIP")
    containers = spec.get("containers")
    if not isinstance(ip, str) or not ip or not isinstance(containers, list) or not containers:
        return None
    first = containers[0]
    ports = first.get("ports") if isinstance(first, Mapping) else None
    numbers = [p for p in ports if isinstance(p, Mapping)] if isinstance(ports, list) else []
    chosen = next((p for p in numbers if p.get("name") == "http"), numbers[0] if numbers else None)
    port = chosen.get("containerPort") if chosen is not None else None
    if not isinstance(port, int):
        return None
    host = f"[{ip}]" if ":" in ip else ip
    return f"http://{host}:{port}"


async def probe(client: httpx.AsyncClient, addresses: Sequence[str]) -> Reach:
    """Ask ``/ready`` of every address (one request each, one after the other) and gather what they say."""
    answered = 0
    unreachable: str | None = None
    for address in sorted(addresses):
        try:
            response = await client.get(f"{address}/ready", timeout=PROBE_TIMEOUT_SECONDS)
            body = response.json()
        except (httpx.HTTPError, ValueError):
            continue
        answered += 1
        unreachable = unreachable or memory_problem(body)
    return Reach(answered, unreachable)
