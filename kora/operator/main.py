"""The operator process: kopf watches feeding the reconciler, the admission webhook, start-up and shutdown.

kopf does what it is good at: logging in (service
account in a cluster, ``KUBECONFIG`` outside), watching (every namespace, or the ones given), serving the
admission webhook and keeping its ValidatingWebhookConfiguration, and a liveness endpoint. Kora adds ``GET
/metrics`` on its own port (:mod:`kora.operator.metrics_endpoint`), in the same event loop. Its handlers only
hand what they see to :class:`kora.operator.reconciler.Reconciler`; the reconcile itself runs in the
reconciler's work queue, so kopf's own progress annotations (which would be a write per change) are never
used: Kora's handlers are ``on.event`` watchers, which store nothing on the resources.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import kopf
from lightkube import AsyncClient
from lightkube.config.kubeconfig import KubeConfig

from kora.operator.admission import WEBHOOK_CONFIGURATION, reference_warnings, validation_messages, webhook_server
from kora.operator.children import KIND_LABEL, MANAGED_BY, NAME_LABEL
from kora.operator.kube import Kube
from kora.operator.metrics_endpoint import serving_metrics
from kora.operator.reachability import pod_address
from kora.operator.reconciler import RESYNC_SECONDS, Reconciler
from kora.operator.settings import OperatorSettings
from kora.operator.status import JsonObject, pod_failure
from kora.resources import GROUP, RESOURCE_CLASSES, VERSION, ResourceRef
from kora.resources.crd import plural

if TYPE_CHECKING:
    import socket

    from prometheus_client import CollectorRegistry

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WebhookOptions:
    """Where the admission webhook listens and how the API server reaches it.

    ``host``: the name or address in the certificate and (without ``service``) the URL; ``service``:
    ``(namespace, name)`` of the operator's Service, which the API server then calls on ``port``.
    """

    listen: str = "0.0.0.0"
    port: int = 9443
    host: str = "127.0.0.1"
    service: tuple[str, str] | None = None


@dataclass(frozen=True)
class MetricsOptions:
    """``GET /metrics`` on ``sock`` (bound and listening; closed when the operator stops), exposing
    ``registry`` (the one :func:`kora.core.telemetry.setup_telemetry` installed)."""

    sock: socket.socket
    registry: CollectorRegistry


def _plain(body: Mapping[str, Any]) -> JsonObject:
    # kopf hands out read-only views; the reconciler keeps plain copies.
    return {key: _copy(value) for key, value in body.items()}


def _copy(value: object) -> object:
    if isinstance(value, Mapping):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy(item) for item in value]
    return value


def _owner(body: Mapping[str, Any]) -> ResourceRef | None:
    """The Kora resource a Deployment or pod the operator made belongs to, from its labels (None: not one)."""
    labels = body.get("metadata", {}).get("labels", {})
    kind, name = labels.get(KIND_LABEL), labels.get(NAME_LABEL)
    if kind not in RESOURCE_CLASSES or not name:
        return None
    return ResourceRef(kind, body["metadata"]["namespace"], name)


def build_registry(reconciler: Reconciler, *, webhook: bool) -> kopf.OperatorRegistry:
    """kopf handlers that feed ``reconciler``; with ``webhook``, the validating admission handlers too."""
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)

    for kind in RESOURCE_CLASSES:

        def observe(event: Mapping[str, Any], body: Mapping[str, Any], kind: str = kind, **_: Any) -> None:
            reconciler.observe(kind, _plain(body), deleted=event.get("type") == "DELETED")

        kopf.on.event(GROUP, VERSION, plural(kind), registry=registry, id=f"observe-{plural(kind)}")(observe)

        if webhook:

            def validate(body: Mapping[str, Any], warnings: list[str], kind: str = kind, **_: Any) -> None:
                messages = validation_messages(kind, body)
                if messages:
                    raise kopf.AdmissionError(f"invalid {kind}: " + "; ".join(messages), code=422)
                warnings.extend(reference_warnings(kind, body, lambda ref: ref in reconciler.resources))

            kopf.on.validate(
                GROUP,
                VERSION,
                plural(kind),
                registry=registry,
                id=f"validate-{plural(kind)}",
                operations=["CREATE", "UPDATE"],
                # While the operator is down, resources are still accepted; the reconciler then reports any
                # problem as phase Failed with the same message, so nothing invalid ever runs.
                ignore_failures=True,
            )(validate)

    @kopf.on.event("apps", "v1", "deployments", labels={"app.kubernetes.io/managed-by": MANAGED_BY}, registry=registry)
    def observe_deployment(event: Mapping[str, Any], body: Mapping[str, Any], **_: Any) -> None:
        owner = _owner(body)
        if owner is not None:
            deleted = event.get("type") == "DELETED"
            reconciler.observe_deployment(owner, None if deleted else _plain(body.get("status") or {}))

    @kopf.on.event("", "v1", "pods", labels={"app.kubernetes.io/managed-by": MANAGED_BY}, registry=registry)
    def observe_pod(event: Mapping[str, Any], body: Mapping[str, Any], **_: Any) -> None:
        owner = _owner(body)
        if owner is not None:
            # A pod on its way out (a rollout replacing it) no longer speaks for its workload.
            deleted = event.get("type") == "DELETED" or bool(body["metadata"].get("deletionTimestamp"))
            failure = pod_failure(body.get("status") or {})
            address = pod_address(body)
            reconciler.observe_pod(owner, body["metadata"]["name"], failure, deleted=deleted, address=address)

    return registry


def kopf_settings(webhook: WebhookOptions | None) -> kopf.OperatorSettings:
    """kopf's settings: no Kubernetes Events posted (a write per log line), only Kora's Deployments and pods
    watched (a server-side label selector: the API server sends nothing of other workloads, however many the
    cluster runs), and the admission webhook when ``webhook`` is given."""
    settings = kopf.OperatorSettings()
    settings.posting.enabled = False
    settings.watching.server_timeout = 300
    managed = f"app.kubernetes.io/managed-by={MANAGED_BY}"
    settings.watching.label_selectors["apps", "deployments"] = managed
    settings.watching.label_selectors["v1", "pods"] = managed
    if webhook is not None:
        settings.admission.server = webhook_server(
            listen=webhook.listen, port=webhook.port, host=webhook.host, service=webhook.service
        )
        settings.admission.managed = WEBHOOK_CONFIGURATION
    return settings


async def run_operator(
    settings: OperatorSettings,
    *,
    namespaces: list[str],
    webhook: WebhookOptions | None = None,
    liveness: str | None = None,
    metrics: MetricsOptions | None = None,
    resync_seconds: float = RESYNC_SECONDS,
    stop: asyncio.Event | None = None,
    ready: asyncio.Event | None = None,
    kube_config: KubeConfig | None = None,
) -> None:
    """Run the operator until ``stop`` is set (or the task is cancelled).

    ``namespaces``: watch only these (empty: every namespace). ``liveness``: kopf's health endpoint
    (``http://0.0.0.0:8081/healthz``). ``metrics``: where ``GET /metrics`` is served (None: nowhere). ``ready``
    is set once the watches are running. ``kube_config``: the credentials (None: ``KubeConfig.from_env()``).
    """
    client = AsyncClient(config=kube_config or KubeConfig.from_env(), field_manager="kora-operator")
    reconciler = Reconciler(Kube(client), settings, resync_seconds=resync_seconds)
    registry = build_registry(reconciler, webhook=webhook is not None)
    stop_flag = stop or asyncio.Event()
    try:
        # The metrics endpoint starts first and stops last: a scrape sees the whole life of the watches.
        async with contextlib.AsyncExitStack() as stack, asyncio.TaskGroup() as group:
            if metrics is not None:
                await stack.enter_async_context(serving_metrics(metrics.sock, metrics.registry))
            work = group.create_task(reconciler.run(), name="kora-reconciler")
            await kopf.operator(
                registry=registry,
                settings=kopf_settings(webhook),
                standalone=True,
                clusterwide=not namespaces,
                namespaces=namespaces,
                liveness_endpoint=liveness,
                stop_flag=stop_flag,
                ready_flag=ready,
            )
            work.cancel()
    finally:
        reconciler.queue.close()
        with contextlib.suppress(Exception):
            await client.close()
