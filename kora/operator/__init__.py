"""``kora operator``: the Kubernetes operator (kopf) that runs Agents, ModelAPIs, MCPServers and MemoryStores.

Modules, from the process down:

- :mod:`.cli` (the ``kora operator`` command) and :mod:`.main` (kopf's watches feeding the reconciler, the
  admission webhook, start-up and shutdown); :mod:`.credentials` finds the Kubernetes credentials first.
- :mod:`.queue` (coalescing work queue, one worker per key, retries with backoff) and :mod:`.reconciler` (makes
  each resource's children and status match its spec, writing only what differs).
- :mod:`.children` (pure functions from one resource to the manifests of the objects it owns, built from
  :mod:`kora.resources.wiring` exactly as ``kora up`` plans its processes) and :mod:`.status` (phase, message,
  endpoint and conditions, pure functions).
- :mod:`.kube` (the calls to the Kubernetes API, over lightkube) and :mod:`.admission` (the validating webhook).
- :mod:`.settings` (:class:`OperatorSettings` from the chart's environment), :mod:`.metrics` and
  :mod:`.metrics_endpoint` (the operator's own metrics and ``GET /metrics``).
"""
