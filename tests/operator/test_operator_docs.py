"""docs/operator.md's command for running the operator outside a cluster works as written, on a real API server."""

import contextlib
import os
import signal
import subprocess
from pathlib import Path

import httpx
import pytest
from lightkube.resources.apps_v1 import Deployment

from tests.operator.test_operator_docs_commands import REPO, shell_blocks, shell_env
from tests.support.kube import KubeCluster
from tests.support.operator import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_the_documented_command_runs_the_quickstart(kube_cluster: KubeCluster, tmp_path: Path):
    # The block uses fixed ports (8081 liveness, 9443 webhook) as a user would. It runs in its own process
    # group, stopped as a whole the way Ctrl-C would stop it.
    block = shell_blocks()[1]
    kube_cluster.kubectl("create", "namespace", "demo", check=False)
    log = tmp_path / "operator.log"
    with log.open("w") as sink:
        process = subprocess.Popen(
            ["bash", "-c", block],
            env=shell_env(kube_cluster.env()),
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:

        def live() -> bool:
            assert process.poll() is None, log.read_text()
            try:
                return httpx.get("http://127.0.0.1:8081/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for("the documented operator's liveness endpoint", live)
        kube_cluster.kubectl("apply", "-n", "demo", "-f", str(REPO / "examples" / "quickstart" / "kora.yaml"))
        with kube_cluster.client() as client:
            deployment = wait_for(
                "the quickstart's model Deployment",
                lambda: next(
                    (d for d in client.list(Deployment, namespace="demo") if d.metadata.name == "modelapi-scripted"),
                    None,
                ),
            )
        assert deployment.spec.template.spec.containers[0].image == "ghcr.io/example/kora:0.1.0"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
        kube_cluster.kubectl("delete", "namespace", "demo", "--wait=false", check=False)
