"""The console's reads on a cluster (``CONSOLE_SOURCE=kubernetes``): the Kora resources from the Kubernetes API
(read-only: ``list`` of the four kinds, their spec for the links and their status for phase, message and
conditions) and each resource's operator token from the credentials Secret the operator made for it
(``<service name>-credentials``, key ``admin-token``); sessions and memory are then read from the workloads at
their Service addresses, as :class:`~kora.console.sources.Sources` does.

The credentials are the pod's service account in a cluster, else ``KUBECONFIG`` (:func:`load_kube_config`). The
permissions it needs: ``list`` on ``agents``, ``modelapis``, ``mcpservers`` and ``memorystores`` of
``kora.dev``, and ``get`` on ``secrets`` (the Helm chart's console role grants exactly these).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import httpx
import httpx2
from lightkube import ApiError, AsyncClient
from lightkube.config.kubeconfig import KubeConfig
from lightkube.resources.core_v1 import Secret
from pydantic import ValidationError

from kora.console.sources import ConsoleCondition, ConsoleResource, Sources
from kora.core.errors import SourceError
from kora.local import Link
from kora.operator.credentials import load_kube_config
from kora.operator.kube import KORA_RESOURCES
from kora.resources import (
    ADMIN_TOKEN_KEY,
    API_VERSION,
    RESOURCE_CLASSES,
    ClusterDNS,
    Kind,
    ResourceRef,
    credentials_secret,
    links_of,
    route_path,
    service_name,
)

__all__ = ["ClusterSources", "load_kube_config", "resource_of"]

#: The order kinds are listed in: what is used before what uses it, as kora up starts them.
KINDS = (Kind.MODEL_API, Kind.MCP_SERVER, Kind.MEMORY_STORE, Kind.AGENT)


def resource_of(body: Mapping[str, Any]) -> ConsoleResource:
    """A Kora resource as the Kubernetes API returns it (a JSON object), as the console shows it: its phase,
    message and conditions from ``status`` (``Pending`` before the operator wrote one), its links from ``spec``
    (none when the spec is not one Kora accepts: the phase says so), its gateway path and its Service address."""
    kind = str(body.get("kind", ""))
    metadata = body.get("metadata") or {}
    namespace, name = str(metadata.get("namespace", "default")), str(metadata.get("name", ""))
    status = body.get("status") or {}
    conditions = tuple(
        ConsoleCondition(
            type=str(c.get("type", "")),
            status=str(c.get("status", "Unknown")),
            reason=str(c.get("reason") or ""),
            message=str(c.get("message") or ""),
        )
        for c in status.get("conditions") or []
        if isinstance(c, Mapping)
    )
    links: tuple[Link, ...] = ()
    try:
        parsed = RESOURCE_CLASSES[kind].model_validate(dict(body))
    except (KeyError, ValidationError):
        pass
    else:
        links = tuple(Link(relation, target.kind, target.name) for relation, target in links_of(parsed))
    ref = ResourceRef(kind, namespace, name)
    return ConsoleResource(
        kind=kind,
        namespace=namespace,
        name=name,
        phase=str(status.get("phase") or "Pending"),
        message=str(status.get("message") or ""),
        gateway_path=route_path(kind, namespace, name),
        direct_url=ClusterDNS().direct_url(ref),
        links=links,
        conditions=conditions,
    )


class ClusterSources(Sources):
    """The reads of a console on a cluster through ``kube``, of ``namespaces`` (empty: every namespace)."""

    origin = "The cluster"

    def __init__(self, client: httpx.AsyncClient, kube: AsyncClient, namespaces: Sequence[str] = ()) -> None:
        super().__init__(client)
        self._kube = kube
        self._namespaces = list(namespaces)

    @classmethod
    @asynccontextmanager
    async def connect(
        cls, client: httpx.AsyncClient, namespaces: Sequence[str] = (), config: KubeConfig | None = None
    ) -> AsyncIterator[ClusterSources]:
        """Sources on the cluster ``config`` names (None: :func:`load_kube_config`, which raises ``ValueError``
        saying what it looked for when there are no credentials)."""
        kube = AsyncClient(config=config or load_kube_config())
        try:
            yield cls(client, kube, namespaces)
        finally:
            await kube.close()

    def logs_hint(self, resource: ConsoleResource) -> str:
        """The ``kubectl logs`` of its Deployment."""
        return f"See 'kubectl logs -n {resource.namespace} deployment/{service_name(resource.kind, resource.name)}'."

    async def resources(self) -> list[ConsoleResource]:
        """Every Kora resource of the namespaces, kind by kind (ModelAPIs, MCPServers, MemoryStores, Agents), each
        kind by namespace and name."""
        found: list[ConsoleResource] = []
        for kind in KINDS:
            bodies: list[Mapping[str, Any]] = []
            for namespace in self._namespaces or ["*"]:
                try:
                    async for item in self._kube.list(KORA_RESOURCES[kind.value], namespace=namespace):
                        bodies.append({"apiVersion": API_VERSION, "kind": kind.value, **dict(item)})
                except ApiError as error:
                    where = "every namespace" if namespace == "*" else f"namespace {namespace}"
                    raise SourceError(
                        f"The Kubernetes API refused to list {kind.value}s in {where}: {error.status.message} "
                        "(the console's service account needs 'list' on Kora's resources)."
                    ) from None
                except httpx2.HTTPError as error:
                    raise SourceError(f"The Kubernetes API did not answer: {error or type(error).__name__}.") from None
            resources = [resource_of(body) for body in bodies]
            found += sorted(resources, key=lambda r: (r.namespace, r.name))
        return found

    async def token(self, resource: ConsoleResource) -> str:
        """The operator token in the resource's credentials Secret."""
        ref = ResourceRef(resource.kind, resource.namespace, resource.name)
        name = credentials_secret(ref)
        try:
            secret = await self._kube.get(Secret, name, namespace=resource.namespace)
        except ApiError as error:
            if error.status.code == 404:
                raise SourceError(
                    f"{resource.kind}/{resource.name} has no credentials Secret {name} yet: has the operator "
                    "reconciled it?"
                ) from None
            raise SourceError(
                f"The Kubernetes API refused to read Secret {resource.namespace}/{name}: {error.status.message}"
            ) from None
        except httpx2.HTTPError as error:
            raise SourceError(f"The Kubernetes API did not answer: {error or type(error).__name__}.") from None
        encoded = (secret.data or {}).get(ADMIN_TOKEN_KEY)
        if not encoded:
            raise SourceError(f"Secret {resource.namespace}/{name} holds no {ADMIN_TOKEN_KEY}.")
        try:
            return base64.b64decode(encoded, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise SourceError(f"Secret {resource.namespace}/{name}: {ADMIN_TOKEN_KEY} is not base64 text.") from None
