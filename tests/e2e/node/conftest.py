"""Fixtures of the real-node tier: one node, Kora's image imported into it, the Helm chart installed.

The node and the chart are shared by every test of this package (starting them costs ~1 min); each test works in
namespaces of its own. On teardown the chart is uninstalled and the node stopped, and ``stop-node.sh`` must
report a clean host: anything left behind fails the run.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.kube import KubeCluster
from tests.support.node import (
    BuiltImage,
    KoraOnNode,
    NodeUnavailable,
    kora_on_node,
    load_image,
    require_node,
    start_node,
    stop_node,
)

pytestmark = pytest.mark.node


@pytest.fixture(scope="package")
def node() -> Iterator[KubeCluster]:
    """A started node (``tests.support.kube.KubeCluster`` for its kubeconfig and ``kubectl``)."""
    require_node()
    try:
        cluster = start_node()
    except NodeUnavailable as error:
        pytest.fail(str(error), pytrace=False)
    yield cluster
    stopped = stop_node()
    assert stopped.returncode == 0, f"stop-node.sh left the host unclean: {stopped.stderr}"


@pytest.fixture(scope="package")
def kora(node: KubeCluster, kora_image: BuiltImage) -> Iterator[KoraOnNode]:
    """Kora's chart installed on the node, its operator running in a pod from the imported image."""
    load_image(node, kora_image.archive)
    with kora_on_node(node, kora_image.tag) as installed:
        yield installed
