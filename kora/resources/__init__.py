"""Kora's resource models, manifest loader and wiring: every deployment is a graph of resources (docs/resources.md).

Layers, importing only downward: ``models`` (pydantic models of Agent, ModelAPI, MCPServer, MemoryStore)
<- ``graph`` (:class:`ResourceGraph`, references, dependencies) <- ``loader`` (YAML -> graph,
:class:`ManifestError`) <- ``urls`` / ``wiring`` (graph -> :class:`WorkloadPlan` per workload) and
``crd`` (CustomResourceDefinitions generated from the models).
"""

from kora.resources.graph import ResourceGraph, ResourceRef
from kora.resources.loader import ManifestError, Problem, dependency_order, load_path, load_text
from kora.resources.models import (
    API_VERSION,
    GROUP,
    VERSION,
    Agent,
    AnyResource,
    Kind,
    MCPServer,
    MemoryStore,
    ModelAPI,
    Phase,
)
from kora.resources.urls import ClusterDNS, GatewayRouted, Loopback, UrlStrategy
from kora.resources.wiring import EnvEntry, SecretKeyRef, WorkloadPlan, plan_workload, plan_workloads, route_timeout

__all__ = [
    "API_VERSION",
    "GROUP",
    "VERSION",
    "Agent",
    "AnyResource",
    "ClusterDNS",
    "EnvEntry",
    "GatewayRouted",
    "Kind",
    "Loopback",
    "MCPServer",
    "ManifestError",
    "MemoryStore",
    "ModelAPI",
    "Phase",
    "Problem",
    "ResourceGraph",
    "ResourceRef",
    "SecretKeyRef",
    "UrlStrategy",
    "WorkloadPlan",
    "dependency_order",
    "load_path",
    "load_text",
    "plan_workload",
    "plan_workloads",
    "route_timeout",
]
