"""What the console shows, read where it lives: ``kora up``'s state file (the workloads, their phases and URLs),
its credentials file (the operators' tokens), each agent's ``/memory`` routes (sessions and their events) and each
memory store's admin API (facts, erasure).

Every read says what went wrong in words a person can act on (:class:`SourceError`): no ``kora up`` state, an
agent that does not answer, a store that refused the token.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

from kora.core.errors import SourceError
from kora.core.protocol import DELEGATION_TOOL_PREFIX
from kora.local import Link, UpState, WorkloadState, read_credentials, read_state
from kora.resources import ADMIN_TOKEN_KEY, Kind, ResourceRef, credentials_secret

#: Seconds to wait for an agent or a memory store.
BACKEND_TIMEOUT_SECONDS = 10.0
#: Most facts a store listing asks for.
FACTS_LIMIT = 500
#: Most events of a session the timeline shows.
EVENTS_LIMIT = 500


@dataclass(frozen=True)
class ConsoleCondition:
    """One status condition of a resource (``type``, ``status`` ``True``/``False``/``Unknown``, ``reason``,
    ``message``), as Kubernetes reports it."""

    type: str
    status: str
    reason: str = ""
    message: str = ""


@dataclass(frozen=True)
class ConsoleResource:
    """One workload of the run, as the console shows it: ``links`` are the resources it uses (its ModelAPI, tool
    servers, the peers it may delegate to, its memory store), ``conditions`` its status conditions (none for a
    ``kora up`` workload, whose ``message`` says what it waits for)."""

    kind: str
    namespace: str
    name: str
    phase: str
    message: str
    gateway_path: str
    direct_url: str
    links: tuple[Link, ...] = ()
    conditions: tuple[ConsoleCondition, ...] = ()

    @property
    def key(self) -> str:
        """``namespace/name``, how the console's pages name a resource in their query strings."""
        return f"{self.namespace}/{self.name}"

    @property
    def ag_ui_path(self) -> str:
        """The agent's AG-UI route on the gateway (same origin as the console)."""
        return f"{self.gateway_path}/ag-ui"

    @property
    def peers(self) -> list[str]:
        """Names of the agents this agent may delegate to."""
        return [link.name for link in self.links if link.relation == "delegates"]

    @property
    def delegation_tools(self) -> dict[str, str]:
        """``{delegation tool name: peer name}``: how this agent's delegations appear as tool calls."""
        return {f"{DELEGATION_TOOL_PREFIX}{peer}": peer for peer in self.peers}


def _resource(workload: WorkloadState) -> ConsoleResource:
    return ConsoleResource(
        kind=workload.kind,
        namespace=workload.namespace,
        name=workload.name,
        phase=workload.phase,
        message=workload.message,
        gateway_path=urlsplit(workload.gateway_url).path.rstrip("/"),
        direct_url=workload.direct_url.rstrip("/"),
        links=tuple(workload.links),
    )


class Sources(ABC):
    """The reads of one console: where the resources and the operator tokens come from is the subclass's
    (:class:`LocalSources`: a ``kora up`` run; :class:`kora.console.cluster.ClusterSources`: the Kubernetes API);
    sessions and memory are read from the resources themselves with those tokens."""

    #: How the pages name where the resources come from ("The kora up run", "The cluster").
    origin: str = "The run"

    def __init__(self, client: httpx.AsyncClient) -> None:
        self._client = client

    @abstractmethod
    async def resources(self) -> list[ConsoleResource]:
        """Every resource to show. Raises :class:`SourceError` when they cannot be read."""

    @abstractmethod
    async def token(self, resource: ConsoleResource) -> str:
        """The operator token of ``resource``. Raises :class:`SourceError` when there is none."""

    def logs_hint(self, resource: ConsoleResource) -> str:
        """Where to read the resource's log, as a sentence."""
        return f"See its log ({resource.kind}/{resource.name})."

    async def find(self, kind: Kind, key: str | None) -> ConsoleResource:
        """The resource ``namespace/name`` of ``kind`` (the first of that kind when ``key`` is None). Raises
        :class:`SourceError` when there is none."""
        found = [r for r in await self.resources() if r.kind == kind.value]
        if not found:
            raise SourceError(f"{self.origin} has no {kind.value}.")
        if key is None:
            return found[0]
        for resource in found:
            if resource.key == key:
                return resource
        raise SourceError(f"{self.origin} has no {kind.value} '{key}'.")

    async def _call(self, resource: ConsoleResource, method: str, path: str, **kwargs: Any) -> Any:
        """``method path`` on the resource's own address with its operator token; the decoded JSON answer."""
        headers = {"Authorization": f"Bearer {await self.token(resource)}"}
        what = f"{resource.kind}/{resource.name}"
        try:
            answer = await self._client.request(
                method, resource.direct_url + path, headers=headers, timeout=BACKEND_TIMEOUT_SECONDS, **kwargs
            )
        except httpx.HTTPError as error:
            raise SourceError(
                f"{what} did not answer ({type(error).__name__}); it is {resource.phase}. {self.logs_hint(resource)}"
            ) from None
        if answer.status_code >= 400:
            raise SourceError(f"{what} answered {answer.status_code}: {_message(answer)}")
        return answer.json()

    async def sessions(self, agent: ConsoleResource) -> list[dict[str, Any]]:
        """The agent's sessions (every user's: read with its operator token), newest first."""
        body = await self._call(agent, "GET", "/memory/sessions")
        sessions: list[dict[str, Any]] = body.get("sessions", [])
        return sorted(sessions, key=lambda s: str(s.get("updated_at", "")), reverse=True)

    async def events(self, agent: ConsoleResource, session_id: str) -> list[dict[str, Any]]:
        """The session's events, oldest first."""
        params = {"session_id": session_id, "limit": EVENTS_LIMIT}
        body = await self._call(agent, "GET", "/memory/events", params=params)
        events: list[dict[str, Any]] = body.get("events", [])
        return events

    async def approvals(self, agent: ConsoleResource) -> list[dict[str, Any]]:
        """The tool calls of the agent waiting for a person's approval (every user's: read with its operator
        token), oldest first: each ``id``, ``session_id``, ``tool``, ``target``, ``arguments``, ``requested_at``,
        ``expires_at``, ``status``."""
        body = await self._call(agent, "GET", "/approvals")
        approvals: list[dict[str, Any]] = body.get("approvals", [])
        return approvals

    async def decide(
        self, agent: ConsoleResource, approval_id: str, decision: str, reason: str | None = None
    ) -> dict[str, Any]:
        """Decide the agent's waiting call ``approval_id`` as its operator (``decision`` ``approve`` or
        ``reject``, with ``reason`` when given): the agent's answer ``{"approval", "turn"}``, ``turn`` the resumed
        turn's outcome (None while other calls of the same turn still wait)."""
        body: dict[str, Any] = {"decision": decision}
        if reason:
            body["reason"] = reason
        answer: dict[str, Any] = await self._call(agent, "POST", f"/approvals/{quote(approval_id, safe='')}", json=body)
        return answer

    async def facts(self, store: ConsoleResource) -> list[dict[str, Any]]:
        """Every fact of the store (superseded ones included, newest first), read with its admin token."""
        params = {"scope": "store", "include_invalid": "true", "limit": FACTS_LIMIT}
        body = await self._call(store, "GET", "/v1/facts", params=params)
        facts: list[dict[str, Any]] = body.get("facts", [])
        return facts

    async def erase_user(self, store: ConsoleResource, user_id: str) -> dict[str, Any]:
        """Erase ``user_id`` from every tier of the store; what was removed, per tier."""
        removed: dict[str, Any] = (await self._call(store, "POST", "/v1/forget", json={"user_id": user_id}))["removed"]
        return removed


def _message(answer: httpx.Response) -> str:
    """The error message of an answer in OpenAI's or FastAPI's shape, else its first 200 characters."""
    try:
        body = answer.json()
    except ValueError:
        return answer.text[:200]
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        if isinstance(body.get("detail"), str):
            return str(body["detail"])
    return answer.text[:200]


class LocalSources(Sources):
    """The reads of the console of the ``kora up`` run whose state directory is ``state_dir``: its state file
    (the workloads, their phases, URLs and links) and its credentials file (the operator tokens)."""

    origin = "The kora up run"

    def __init__(self, state_dir: Path, client: httpx.AsyncClient) -> None:
        super().__init__(client)
        self.state_dir = state_dir

    def state(self) -> UpState:
        """The run's state. Raises :class:`SourceError` when there is none (or it cannot be read)."""
        try:
            return read_state(self.state_dir)
        except FileNotFoundError:
            raise SourceError(
                f"No kora up run found: {self.state_dir / 'state.json'} does not exist. Start one with "
                "'kora up examples/quickstart'."
            ) from None
        except (OSError, ValueError) as error:
            raise SourceError(f"The state of kora up in {self.state_dir} cannot be read: {error}") from None

    async def resources(self) -> list[ConsoleResource]:
        """Every workload of the run, in start order."""
        return [_resource(w) for w in self.state().workloads]

    def logs_hint(self, resource: ConsoleResource) -> str:
        """``kora logs <name>``."""
        return f"See 'kora logs {resource.name}'."

    async def token(self, resource: ConsoleResource) -> str:
        """The token ``kora up`` generated for ``resource`` (its credentials file)."""
        ref = ResourceRef(resource.kind, resource.namespace, resource.name)
        try:
            tokens = read_credentials(self.state_dir)
        except (OSError, ValueError) as error:
            raise SourceError(f"kora up's credentials cannot be read: {error}") from None
        token = tokens.get(f"{resource.namespace}/{credentials_secret(ref)}/{ADMIN_TOKEN_KEY}")
        if token is None:
            raise SourceError(f"{resource.kind}/{resource.name} has no operator token yet: has kora up started it?")
        return token
