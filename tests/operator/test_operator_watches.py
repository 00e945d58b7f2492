"""The operator's watches: the API server filters Deployments and pods by Kora's label, so a cluster's other
workloads never reach the operator; Kora's own kinds are watched whole."""

from __future__ import annotations

import pytest
from kopf._cogs.structs.references import Resource

from kora.operator.main import kopf_settings

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("group", "version", "plural", "kind", "expected"),
    [
        ("apps", "v1", "deployments", "Deployment", ["app.kubernetes.io/managed-by=kora-operator"]),
        ("", "v1", "pods", "Pod", ["app.kubernetes.io/managed-by=kora-operator"]),
        ("kora.dev", "v1alpha1", "agents", "Agent", []),
        ("apps", "v1", "statefulsets", "StatefulSet", []),
    ],
)
def test_label_selectors_sent_to_the_api_server(
    group: str, version: str, plural: str, kind: str, expected: list[str]
) -> None:
    resource = Resource(group=group, version=version, plural=plural, kind=kind, singular=kind.lower(), namespaced=True)
    assert list(kopf_settings(None).watching.label_selectors.collect(resource)) == expected
