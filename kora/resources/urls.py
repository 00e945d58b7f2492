"""URL strategies: how one workload reaches another, and where each workload listens.

Gateway routes have the path shape ``/{namespace}/{agent|modelapi|mcp}/{name}/...``, the prefix stripped; in
strict gateway-only mode agents receive gateway-routed URLs. Three
strategies implement :class:`UrlStrategy`:

- :class:`ClusterDNS`: Kubernetes Service DNS, ``http://agent-<name>.<namespace>.svc.cluster.local:8000``.
- :class:`GatewayRouted`: through the gateway, ``http://gateway/<namespace>/agent/<name>``; workloads
  still listen where the wrapped ``direct`` strategy says (the gateway's upstream). MemoryStores are the
  exception: agents reach them directly (the store is no public endpoint; strict mode admits exactly its agents
  with a NetworkPolicy).
- :class:`Loopback`: ``http://127.0.0.1:<port>`` with one port per workload (the local runtime).

URLs are base URLs without a trailing slash; callers append ``/v1``, ``/mcp`` etc.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from kora.resources.models import RESOURCE_CLASSES, Kind

#: Port every workload listens on inside the cluster (container port and Service port).
DEFAULT_PORT = 8000


def service_name(kind: str, name: str) -> str:
    """The Service / HTTPRoute name of a workload: ``agent-<name>``, ``modelapi-<name>``, ``mcpserver-<name>``,
    ``memorystore-<name>``. ``KeyError`` for an unknown kind."""
    return f"{RESOURCE_CLASSES[kind].SERVICE_PREFIX}-{name}"


def route_path(kind: str, namespace: str, name: str) -> str:
    """The gateway path prefix of a workload, e.g. ``/default/agent/helper`` (``mcp`` for MCPServers)."""
    return f"/{namespace}/{RESOURCE_CLASSES[kind].ROUTE_SEGMENT}/{name}"


class WorkloadKey(Protocol):
    """Anything shaped like :class:`kora.resources.graph.ResourceRef`: ``kind``, ``namespace``, ``name``."""

    @property
    def kind(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...


class UrlStrategy(Protocol):
    """Addresses of workloads under one network layout."""

    def url(self, ref: WorkloadKey) -> str:
        """Base URL other workloads (and clients) use to reach ``ref``."""
        ...

    def direct_url(self, ref: WorkloadKey) -> str:
        """Base URL of the workload itself, bypassing any gateway (a gateway's upstream)."""
        ...

    def listen(self, ref: WorkloadKey) -> tuple[str, int]:
        """``(host, port)`` the workload binds."""
        ...


class ClusterDNS:
    """Kubernetes Service DNS: ``http://<service>.<namespace>.svc.<cluster_domain>:<port>``; binds 0.0.0.0."""

    def __init__(self, port: int = DEFAULT_PORT, cluster_domain: str = "cluster.local") -> None:
        self.port = port
        self.cluster_domain = cluster_domain

    def url(self, ref: WorkloadKey) -> str:
        """``http://agent-<name>.<namespace>.svc.cluster.local:8000`` and alike."""
        return f"http://{service_name(ref.kind, ref.name)}.{ref.namespace}.svc.{self.cluster_domain}:{self.port}"

    def direct_url(self, ref: WorkloadKey) -> str:
        """Same as :meth:`url`."""
        return self.url(ref)

    def listen(self, ref: WorkloadKey) -> tuple[str, int]:
        """Every interface of the pod, on the one cluster port."""
        return ("0.0.0.0", self.port)


class GatewayRouted:
    """Through a gateway at ``base_url``: ``<base_url>/<namespace>/<agent|modelapi|mcp|memorystore>/<name>``.

    ``direct`` says where workloads listen and what the gateway forwards to (default :class:`ClusterDNS`;
    the local runtime passes :class:`Loopback`).
    """

    def __init__(self, base_url: str, direct: UrlStrategy | None = None) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"gateway base URL must be http(s), got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.direct: UrlStrategy = direct if direct is not None else ClusterDNS()

    def url(self, ref: WorkloadKey) -> str:
        """The gateway URL, e.g. ``http://gw/default/mcp/tools``; a MemoryStore's direct URL (agents reach their
        store directly, admitted by its NetworkPolicy: the store is no public endpoint)."""
        if ref.kind == Kind.MEMORY_STORE.value:
            return self.direct.url(ref)
        return self.route_url(ref)

    def route_url(self, ref: WorkloadKey) -> str:
        """The URL of ``ref``'s gateway route, whatever its kind (a MemoryStore's only exists when it opts in)."""
        return self.base_url + route_path(ref.kind, ref.namespace, ref.name)

    def direct_url(self, ref: WorkloadKey) -> str:
        """The upstream URL under ``direct``."""
        return self.direct.direct_url(ref)

    def listen(self, ref: WorkloadKey) -> tuple[str, int]:
        """Where ``direct`` says."""
        return self.direct.listen(ref)


class Loopback:
    """One port per workload on the loopback interface: ``http://127.0.0.1:<port>``.

    ``ports`` maps ``(kind, namespace, name)`` (a :class:`~kora.resources.graph.ResourceRef` works) to a
    port. A workload without a port raises ``KeyError`` naming it.
    """

    def __init__(self, ports: Mapping[tuple[str, str, str], int], host: str = "127.0.0.1") -> None:
        self.ports = {tuple(key): port for key, port in ports.items()}
        self.host = host

    def _port(self, ref: WorkloadKey) -> int:
        key = (ref.kind, ref.namespace, ref.name)
        if key not in self.ports:
            raise KeyError(f"no loopback port assigned to {ref.kind} {ref.namespace}/{ref.name}")
        return self.ports[key]

    def url(self, ref: WorkloadKey) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://{self.host}:{self._port(ref)}"

    def direct_url(self, ref: WorkloadKey) -> str:
        """Same as :meth:`url`."""
        return self.url(ref)

    def listen(self, ref: WorkloadKey) -> tuple[str, int]:
        """``(host, port)``."""
        return (self.host, self._port(ref))
