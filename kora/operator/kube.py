"""The operator's calls to the Kubernetes API: read a child's content hash, apply, delete, write a status.

One thin layer over lightkube's async client, so the reconciler speaks in manifests (plain JSON objects as
:mod:`kora.operator.children` builds them); the reconciler counts the writes of each reconcile and logs them.

Children are applied with server-side apply under the field manager ``kora-operator`` (``force``: the operator
owns the fields it sets; fields other managers own, such as an autoscaler's replicas, are left alone).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import httpx2
from lightkube import ApiError, AsyncClient
from lightkube.core.resource import NamespacedResource
from lightkube.generic_resource import create_namespaced_resource
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import ConfigMap, Namespace, PersistentVolumeClaim, Secret, Service
from lightkube.resources.networking_v1 import NetworkPolicy
from lightkube.types import PatchType

from kora.operator.children import ChildRef
from kora.operator.status import JsonObject
from kora.resources import GROUP, RESOURCE_CLASSES, VERSION
from kora.resources.crd import plural

#: Field manager of every write the operator makes (``kubectl get -o yaml --show-managed-fields`` shows it).
FIELD_MANAGER: Final = "kora-operator"

HTTPRoute = create_namespaced_resource("gateway.networking.k8s.io", "v1", "HTTPRoute", "httproutes")
Gateway = create_namespaced_resource("gateway.networking.k8s.io", "v1", "Gateway", "gateways")

#: Kora's own kinds as lightkube resources (``kora.dev/v1alpha1``), e.g. ``KORA_RESOURCES["Agent"]``.
KORA_RESOURCES: Final = {
    kind: create_namespaced_resource(GROUP, VERSION, kind, plural(kind)) for kind in RESOURCE_CLASSES
}

#: (apiVersion, kind) of every child kind the operator creates -> its lightkube resource.
CHILD_RESOURCES: Final[Mapping[tuple[str, str], type[NamespacedResource]]] = {
    ("apps/v1", "Deployment"): Deployment,
    ("v1", "Service"): Service,
    ("v1", "ConfigMap"): ConfigMap,
    ("v1", "PersistentVolumeClaim"): PersistentVolumeClaim,
    ("networking.k8s.io/v1", "NetworkPolicy"): NetworkPolicy,
    ("gateway.networking.k8s.io/v1", "HTTPRoute"): HTTPRoute,
    ("gateway.networking.k8s.io/v1", "Gateway"): Gateway,
}


def _resource(key: ChildRef) -> type[NamespacedResource]:
    """The lightkube resource of ``key``'s kind (``KeyError`` for a kind the operator does not create)."""
    return CHILD_RESOURCES[(key.api_version, key.kind)]


def _absent(error: ApiError | httpx2.HTTPStatusError) -> bool:
    """Whether ``error`` says the object does not exist: a 404 for the object, or a 404 for its whole kind, which
    the API server does not serve (a cluster without the Gateway API's CRDs has no HTTPRoute to find or prune;
    that 404 carries no Status body, so lightkube raises httpx's error instead of an ``ApiError``)."""
    if isinstance(error, ApiError):
        return error.status.code == 404
    return error.response.status_code == 404


class Kube:
    """The operator's API calls through ``client``."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client

    async def annotation(self, key: ChildRef, name: str) -> str | None:
        """Annotation ``name`` of the child ``key``: its value, ``""`` when the child lacks it, None when the
        child does not exist or its kind is not served. Raises ``lightkube.ApiError`` (or ``httpx2.HTTPStatusError``)
        for other failures."""
        try:
            found = await self.client.get(_resource(key), key.name, namespace=key.namespace)
        except (ApiError, httpx2.HTTPStatusError) as error:
            if _absent(error):
                return None
            raise
        metadata: ObjectMeta | None = getattr(found, "metadata", None)
        annotations = (metadata.annotations if metadata is not None else None) or {}
        return str(annotations.get(name, ""))

    async def apply(self, manifest: Mapping[str, object]) -> None:
        """Create or update the child ``manifest`` (server-side apply). Raises ``lightkube.ApiError``."""
        key = ChildRef.of(manifest)
        await self.client.patch(
            _resource(key),
            key.name,
            dict(manifest),
            namespace=key.namespace,
            patch_type=PatchType.APPLY,
            field_manager=FIELD_MANAGER,
            force=True,
        )

    async def create_secret(self, manifest: Mapping[str, object]) -> bool:
        """Create the Secret ``manifest`` unless one of its name exists; True when created. Never updates: a
        credentials Secret keeps the tokens it was created with. Raises ``lightkube.ApiError`` for other errors."""
        try:
            secret = Secret.from_dict(dict(manifest))
            assert isinstance(secret, Secret)
            await self.client.create(secret)
        except ApiError as error:
            if error.status.code == 409:
                return False
            raise
        return True

    async def delete(self, key: ChildRef) -> bool:
        """Delete the child ``key``; False when it was already gone (or its kind is not served)."""
        try:
            await self.client.delete(_resource(key), key.name, namespace=key.namespace)
        except (ApiError, httpx2.HTTPStatusError) as error:
            if _absent(error):
                return False
            raise
        return True

    async def deployment_status(self, namespace: str, name: str) -> JsonObject | None:
        """``status`` of Deployment ``namespace/name`` as JSON (``{}`` before the first status), None when absent."""
        try:
            found = await self.client.get(Deployment, name, namespace=namespace)
        except ApiError as error:
            if error.status.code == 404:
                return None
            raise
        return found.status.to_dict() if found.status is not None else {}

    async def label_namespace(self, name: str, label: str, value: str) -> bool | None:
        """Give namespace ``name`` the label ``label=value`` unless it has it (a merge patch of that one label).
        True when it was written, False when it was there already, None when the namespace does not exist.
        Raises ``lightkube.ApiError`` for other failures (a 403 without RBAC for namespaces)."""
        try:
            found = await self.client.get(Namespace, name)
            metadata: ObjectMeta | None = found.metadata
            if ((metadata.labels if metadata is not None else None) or {}).get(label) == value:
                return False
            await self.client.patch(
                Namespace, name, {"metadata": {"labels": {label: value}}}, patch_type=PatchType.MERGE
            )
        except ApiError as error:
            if error.status.code == 404:
                return None
            raise
        return True

    async def resource(self, kind: str, namespace: str, name: str) -> JsonObject | None:
        """The body of Kora resource ``kind`` ``namespace/name`` as JSON, None when absent. Raises
        ``lightkube.ApiError`` for other failures."""
        try:
            found = await self.client.get(KORA_RESOURCES[kind], name, namespace=namespace)
        except ApiError as error:
            if error.status.code == 404:
                return None
            raise
        # A generic resource is the JSON object itself (a dict), metadata included, as read.
        return dict(found)

    async def write_status(self, kind: str, namespace: str, name: str, status: JsonObject) -> bool:
        """Replace what Kora sets in ``status`` of a Kora resource (merge patch on the status subresource;
        ``null`` clears a field Kora no longer sets). False when the resource is gone."""
        try:
            await self.client.patch(
                KORA_RESOURCES[kind].Status,
                name,
                {"status": status},
                namespace=namespace,
                patch_type=PatchType.MERGE,
            )
        except ApiError as error:
            if error.status.code == 404:
                return False
            raise
        return True
