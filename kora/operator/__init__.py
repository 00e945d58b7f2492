"""``kora operator``: the Kubernetes operator (kopf) that runs Agents, ModelAPIs, MCPServers and MemoryStores.

Modules: ``settings`` (:class:`OperatorSettings` from the chart's environment) and ``children`` (pure functions
from one resource to the manifests of the objects it owns, built from :mod:`kora.resources.wiring` exactly as
``kora up`` plans its processes).
"""
