"""The validated resource graph: typed lookups of the resources (and Secrets) of one deployment.

Every Kora deployment is a graph of resources. :class:`ResourceGraph` is what :func:`kora.resources.loader.load_path`
and :func:`~kora.resources.loader.load_text` return and what :mod:`kora.resources.wiring` consumes. It does not validate
by itself; the loader guarantees that every reference in a graph it returns resolves (see the loader's docstring for the
rules).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kora.resources.models import (
    Agent,
    AnyResource,
    Kind,
    MCPServer,
    MemoryStore,
    ModelAPI,
    ObjectMeta,
)

_R = TypeVar("_R", Agent, ModelAPI, MCPServer, MemoryStore)


class ResourceRef(NamedTuple):
    """Identity of one resource: ``(kind, namespace, name)``; e.g. ``("Agent", "default", "helper")``."""

    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


def ref_of(resource: AnyResource) -> ResourceRef:
    """The :class:`ResourceRef` of a resource."""
    return ResourceRef(resource.kind, resource.metadata.namespace, resource.metadata.name)


class Secret(BaseModel):
    """A Kubernetes ``v1`` Secret given alongside the resources (the local runtime resolves ``secretKeyRef``).

    ``data`` values are base64 as in Kubernetes; ``stringData`` values are plain and win on conflicts.
    """

    model_config = ConfigDict(extra="forbid", validate_by_name=True, validate_by_alias=True, serialize_by_alias=True)

    api_version: str = Field(default="v1", alias="apiVersion")
    kind: str = "Secret"
    metadata: ObjectMeta
    type: str = "Opaque"
    data: dict[str, str] = Field(default_factory=dict)
    string_data: dict[str, str] = Field(default_factory=dict, alias="stringData")
    immutable: bool | None = None

    @model_validator(mode="after")
    def _data_is_base64(self) -> Secret:
        for key, value in self.data.items():
            try:
                base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                raise ValueError(f"data.{key}: not base64 (use stringData for plain text)") from None
        return self

    def values(self) -> dict[str, str]:
        """Every key with its decoded value (UTF-8; ``stringData`` wins over ``data``)."""
        decoded = {key: base64.b64decode(value).decode("utf-8", "replace") for key, value in self.data.items()}
        decoded.update(self.string_data)
        return decoded


class ConfigMap(BaseModel):
    """A Kubernetes ``v1`` ConfigMap given alongside the resources; held for runners, not referenced by Kora."""

    model_config = ConfigDict(extra="forbid", validate_by_name=True, validate_by_alias=True, serialize_by_alias=True)

    api_version: str = Field(default="v1", alias="apiVersion")
    kind: str = "ConfigMap"
    metadata: ObjectMeta
    data: dict[str, str] = Field(default_factory=dict)
    binary_data: dict[str, str] = Field(default_factory=dict, alias="binaryData")
    immutable: bool | None = None


@dataclass
class ResourceGraph:
    """All resources of one deployment, keyed by :class:`ResourceRef`, in manifest order.

    ``secrets`` and ``config_maps`` are keyed by ``(namespace, name)``. ``warnings`` holds non-fatal
    findings of the loader (e.g. a ``secretKeyRef`` to a Secret not in the manifests).
    """

    resources: dict[ResourceRef, AnyResource] = field(default_factory=dict)
    secrets: dict[tuple[str, str], Secret] = field(default_factory=dict)
    config_maps: dict[tuple[str, str], ConfigMap] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def __iter__(self) -> Iterator[AnyResource]:
        return iter(self.resources.values())

    def __len__(self) -> int:
        return len(self.resources)

    def get(self, ref: ResourceRef) -> AnyResource | None:
        """The resource ``ref`` names, or None."""
        return self.resources.get(ref)

    def _of(self, cls: type[_R]) -> list[_R]:
        return [resource for resource in self.resources.values() if isinstance(resource, cls)]

    def _one(self, cls: type[_R], kind: Kind, name: str, namespace: str) -> _R:
        resource = self.resources.get(ResourceRef(kind.value, namespace, name))
        if not isinstance(resource, cls):
            raise KeyError(f"no {kind.value} {namespace}/{name}")
        return resource

    @property
    def agents(self) -> list[Agent]:
        """Every Agent, in manifest order."""
        return self._of(Agent)

    @property
    def model_apis(self) -> list[ModelAPI]:
        """Every ModelAPI, in manifest order."""
        return self._of(ModelAPI)

    @property
    def mcp_servers(self) -> list[MCPServer]:
        """Every MCPServer, in manifest order."""
        return self._of(MCPServer)

    @property
    def memory_stores(self) -> list[MemoryStore]:
        """Every MemoryStore, in manifest order."""
        return self._of(MemoryStore)

    def agent(self, name: str, namespace: str = "default") -> Agent:
        """The Agent ``namespace/name``; ``KeyError`` if absent."""
        return self._one(Agent, Kind.AGENT, name, namespace)

    def model_api(self, name: str, namespace: str = "default") -> ModelAPI:
        """The ModelAPI ``namespace/name``; ``KeyError`` if absent."""
        return self._one(ModelAPI, Kind.MODEL_API, name, namespace)

    def mcp_server(self, name: str, namespace: str = "default") -> MCPServer:
        """The MCPServer ``namespace/name``; ``KeyError`` if absent."""
        return self._one(MCPServer, Kind.MCP_SERVER, name, namespace)

    def memory_store(self, name: str, namespace: str = "default") -> MemoryStore:
        """The MemoryStore ``namespace/name``; ``KeyError`` if absent."""
        return self._one(MemoryStore, Kind.MEMORY_STORE, name, namespace)

    def secret(self, name: str, namespace: str = "default") -> Secret | None:
        """The Secret ``namespace/name`` if it was in the manifests."""
        return self.secrets.get((namespace, name))

    def secret_value(self, name: str, key: str, namespace: str = "default") -> str | None:
        """The decoded value of ``key`` in Secret ``namespace/name``, or None if either is missing."""
        secret = self.secret(name, namespace)
        return None if secret is None else secret.values().get(key)

    def namespaces(self) -> list[str]:
        """Namespaces that hold at least one resource, sorted."""
        return sorted({ref.namespace for ref in self.resources})


def dependencies_of(resource: AnyResource) -> list[ResourceRef]:
    """The resources ``resource`` waits for before it can be Ready (``Waiting`` until then).

    Agent: its ModelAPI; its MCPServers unless ``agenticLoop.enableTools`` is false; its peers in
    ``agentNetwork.access`` unless ``enableDelegation`` is false; its bound MemoryStore when
    ``waitForDependencies`` is true. MemoryStore: its summarization and embedding ModelAPIs. ModelAPI and
    MCPServer: nothing.
    """
    namespace = resource.metadata.namespace
    refs: list[ResourceRef] = []
    if isinstance(resource, Agent):
        spec = resource.spec
        refs.append(ResourceRef(Kind.MODEL_API.value, namespace, spec.model_api))
        if spec.config.agentic_loop.enable_tools:
            refs += [ResourceRef(Kind.MCP_SERVER.value, namespace, name) for name in spec.mcp_servers]
        if spec.config.agentic_loop.enable_delegation:
            refs += [ResourceRef(Kind.AGENT.value, namespace, name) for name in spec.agent_network.access]
        memory = spec.config.memory
        if memory.enabled and memory.memory_store is not None and spec.wait_for_dependencies:
            refs.append(ResourceRef(Kind.MEMORY_STORE.value, namespace, memory.memory_store))
    elif isinstance(resource, MemoryStore):
        for reference in (resource.spec.models.summarization, resource.spec.models.embedding):
            if reference is not None:
                model_ref = ResourceRef(Kind.MODEL_API.value, namespace, reference.model_api)
                if model_ref not in refs:
                    refs.append(model_ref)
    return refs


def references_of(resource: AnyResource) -> list[tuple[str, ResourceRef]]:
    """Every resource ``resource`` names, with the YAML field path naming it (for error messages).

    Unlike :func:`dependencies_of` this includes references that are switched off (a listed MCPServer
    with ``enableTools: false`` must still exist: a typo should not wait until tools are switched on).
    """
    namespace = resource.metadata.namespace
    found: list[tuple[str, ResourceRef]] = []
    if isinstance(resource, Agent):
        spec = resource.spec
        found.append(("spec.modelAPI", ResourceRef(Kind.MODEL_API.value, namespace, spec.model_api)))
        found += [
            (f"spec.mcpServers[{index}]", ResourceRef(Kind.MCP_SERVER.value, namespace, name))
            for index, name in enumerate(spec.mcp_servers)
        ]
        found += [
            (f"spec.agentNetwork.access[{index}]", ResourceRef(Kind.AGENT.value, namespace, name))
            for index, name in enumerate(spec.agent_network.access)
        ]
        if spec.config.memory.memory_store is not None:
            found.append(
                (
                    "spec.config.memory.memoryStore",
                    ResourceRef(Kind.MEMORY_STORE.value, namespace, spec.config.memory.memory_store),
                )
            )
    elif isinstance(resource, MemoryStore):
        for path, reference in (
            ("spec.models.summarization.modelAPI", resource.spec.models.summarization),
            ("spec.models.embedding.modelAPI", resource.spec.models.embedding),
        ):
            if reference is not None:
                found.append((path, ResourceRef(Kind.MODEL_API.value, namespace, reference.model_api)))
    return found


#: The relation a reference's field path stands for, as :func:`links_of` names it.
_RELATIONS = (
    ("spec.modelAPI", "model"),
    ("spec.mcpServers", "tools"),
    ("spec.agentNetwork.access", "delegates"),
    ("spec.config.memory.memoryStore", "memory"),
    ("spec.models.summarization", "summarization model"),
    ("spec.models.embedding", "embedding model"),
)


def links_of(resource: AnyResource) -> list[tuple[str, ResourceRef]]:
    """The edges of the resource graph that start at ``resource``: ``(relation, target)`` with relation ``model``
    (an Agent's ModelAPI), ``tools`` (its MCPServers), ``delegates`` (the peers of ``agentNetwork.access`` it may
    delegate to), ``memory`` (its bound MemoryStore), ``summarization model`` / ``embedding model`` (a
    MemoryStore's ModelAPIs). References the resource switched off (tools with ``enableTools: false``, peers with
    ``enableDelegation: false``, a store with memory disabled) are no edges: the resource does not use them."""
    links: list[tuple[str, ResourceRef]] = []
    for path, target in references_of(resource):
        relation = next(name for prefix, name in _RELATIONS if path.startswith(prefix))
        if isinstance(resource, Agent):
            config = resource.spec.config
            if (
                (relation == "tools" and not config.agentic_loop.enable_tools)
                or (relation == "delegates" and not config.agentic_loop.enable_delegation)
                or (relation == "memory" and not config.memory.enabled)
            ):
                continue
        links.append((relation, target))
    return links


def secret_refs_of(resource: AnyResource) -> list[tuple[str, str, str]]:
    """Every ``secretKeyRef`` of ``resource`` as ``(field path, secret name, key)``."""
    found: list[tuple[str, str, str]] = []
    if isinstance(resource, Agent | MCPServer):
        entries = [(f"spec.config.env[{i}]", e) for i, e in enumerate(resource.spec.config.env)]
    else:
        entries = []
    for path, entry in entries:
        if entry.value_from is not None:
            ref = entry.value_from.secret_key_ref
            found.append((f"{path}.valueFrom.secretKeyRef", ref.name, ref.key))
    if isinstance(resource, ModelAPI) and resource.spec.proxy_config is not None:
        api_key = resource.spec.proxy_config.api_key
        if api_key is not None and api_key.value_from is not None:
            ref = api_key.value_from.secret_key_ref
            found.append(("spec.proxyConfig.apiKey.valueFrom.secretKeyRef", ref.name, ref.key))
    if isinstance(resource, MemoryStore) and resource.spec.storage.external is not None:
        ref = resource.spec.storage.external.connection_secret_ref
        found.append(("spec.storage.external.connectionSecretRef", ref.name, ref.key))
    return found


def graph_of(*resources: AnyResource) -> ResourceGraph:
    """A graph holding ``resources`` as given, without the loader's checks (tests, the operator)."""
    return ResourceGraph(resources={ref_of(resource): resource for resource in resources})
