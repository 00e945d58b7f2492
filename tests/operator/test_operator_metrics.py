"""``kora operator``'s telemetry as a real process (docs/telemetry.md: metrics over OTLP
and as Prometheus text at ``/metrics`` on each workload): ``GET /metrics`` on ``--metrics-port``, scraped with a
real HTTP client and parsed with prometheus_client's parser, counts the reconciles of the resources it
reconciled, and those the API server refused with outcome ``error``; the same metrics and the ``reconcile
{Kind}`` spans reach an OTLP receiver; client mistakes on the metrics port are JSON 4xx; a bad
``--metrics-port`` stops start-up with exit code 2 naming the option.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest

from kora.core.net import bind_socket, free_port
from kora.operator.cli import EXIT_SETTINGS_ERROR
from tests.support.kube import KubeCluster
from tests.support.operator import OPERATOR_ENV, phase_is, resource_status, running_operator, wait_for
from tests.support.otlp import OtlpReceiver
from tests.support.processes import FAST_EXPORT, KORA, clean_env, prometheus

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "examples" / "quickstart" / "kora.yaml"

Samples = dict[str, list[tuple[dict[str, str], float]]]


def _value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels`` (0 when there is none)."""
    return sum(value for found, value in samples.get(name, []) if labels.items() <= found.items())


def _reconciled(cluster: KubeCluster, namespace: str) -> None:
    """Apply the quickstart and wait until the operator has given its ModelAPI and Agent a status."""
    cluster.kubectl("apply", "-n", namespace, "-f", str(QUICKSTART))
    with cluster.client() as client:
        wait_for("ModelAPI status", lambda: resource_status(client, "ModelAPI", "scripted", namespace))
        wait_for("agent Waiting", phase_is(client, "Agent", "assistant", namespace, "Waiting"))


@pytest.mark.slow
def test_metrics_count_the_reconciles_of_each_kind(kube_cluster: KubeCluster, tmp_path: Path):
    namespace = kube_cluster.fresh_namespace("metrics")
    with running_operator(kube_cluster, namespace, tmp_path / "operator.log") as operator:
        assert operator.metrics is not None
        before = prometheus(operator.metrics)
        assert "process_resident_memory_bytes" in before  # the same registry as every workload's /metrics
        _reconciled(kube_cluster, namespace)
        samples = prometheus(operator.metrics)

        for kind in ("ModelAPI", "MCPServer", "Agent"):
            count = _value(
                samples, "kora_operator_reconcile_duration_seconds_count", kora_resource_kind=kind, kora_outcome="ok"
            )
            assert count >= 1, (kind, samples.get("kora_operator_reconcile_duration_seconds_count"))
            # The +Inf bucket holds every reconcile; the sum is a positive duration in seconds.
            assert _value(
                samples, "kora_operator_reconcile_duration_seconds_bucket", kora_resource_kind=kind, le="+Inf"
            ) == _value(samples, "kora_operator_reconcile_duration_seconds_count", kora_resource_kind=kind)
            assert 0 < _value(samples, "kora_operator_reconcile_duration_seconds_sum", kora_resource_kind=kind) < 60
        # The ModelAPI's Deployment, Service and ConfigMap were applied and its status written: >= 4 writes. The
        # waiting Agent has nothing created, only its status.
        assert _value(samples, "kora_operator_reconcile_writes_total", kora_resource_kind="ModelAPI") >= 4
        assert _value(samples, "kora_operator_reconcile_writes_total", kora_resource_kind="Agent") >= 1
        assert not _value(samples, "kora_operator_reconcile_duration_seconds_count", kora_outcome="error")

        # A scraper asking for OpenMetrics gets it, as from every other workload.
        response = httpx.get(operator.metrics, headers={"Accept": "application/openmetrics-text"}, timeout=5)
        assert response.headers["content-type"].startswith("application/openmetrics-text")
        assert response.text.rstrip().endswith("# EOF")


@pytest.mark.slow
def test_a_failed_reconcile_is_counted_with_outcome_error(kube_cluster: KubeCluster, tmp_path: Path):
    namespace = kube_cluster.fresh_namespace("metrics-refused")
    # A webhook nothing answers, with failure policy Fail, for Deployments of this namespace only: the API server
    # refuses them, so the ModelAPI's reconcile fails (and the queue retries it).
    kube_cluster.kubectl("label", "namespace", namespace, f"kora-test/refuse-deployments={namespace}")
    refusing = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": namespace},
        "webhooks": [
            {
                "name": "refuse.kora-test.dev",
                "clientConfig": {"url": f"https://127.0.0.1:{free_port()}/refuse"},
                "rules": [
                    {
                        "apiGroups": ["apps"],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["deployments"],
                    }
                ],
                "namespaceSelector": {"matchLabels": {"kora-test/refuse-deployments": namespace}},
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 2,
            }
        ],
    }
    kube_cluster.kubectl("apply", "-f", "-", stdin=json.dumps(refusing))
    try:
        _count_a_refused_reconcile(kube_cluster, namespace, tmp_path)
    finally:
        kube_cluster.kubectl("delete", "validatingwebhookconfiguration", namespace)


def _count_a_refused_reconcile(kube_cluster: KubeCluster, namespace: str, tmp_path: Path) -> None:
    with running_operator(kube_cluster, namespace, tmp_path / "operator.log") as operator:
        assert operator.metrics is not None
        metrics = operator.metrics
        model = {
            "apiVersion": "kora.dev/v1alpha1",
            "kind": "ModelAPI",
            "metadata": {"name": "refused"},
            "spec": {"mode": "Proxy", "proxyConfig": {"apiBase": "http://llm.invalid/v1"}},
        }
        kube_cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(model))
        failed = wait_for(
            "a failed ModelAPI reconcile counted",
            lambda: _value(
                prometheus(metrics),
                "kora_operator_reconcile_duration_seconds_count",
                kora_resource_kind="ModelAPI",
                kora_outcome="error",
            ),
        )
        assert isinstance(failed, float)
        assert failed >= 1
        assert "reconcile of" in operator.output()  # the queue logged the failure it retries
        # Writes count successful reconciles only (a failed one's Service apply is not known to the metric).
        samples = prometheus(metrics)
        assert not _value(samples, "kora_operator_reconcile_writes_total", kora_resource_kind="ModelAPI")
        assert not _value(samples, "kora_operator_reconcile_duration_seconds_count", kora_outcome="ok")


@pytest.mark.slow
def test_client_mistakes_on_the_metrics_port_are_json_4xx(kube_cluster: KubeCluster, tmp_path: Path):
    namespace = kube_cluster.fresh_namespace("metrics-errors")
    with running_operator(kube_cluster, namespace, tmp_path / "operator.log") as operator:
        assert operator.metrics is not None
        base = operator.metrics.removesuffix("/metrics")
        missing = httpx.get(f"{base}/nothing-here", timeout=5)
        assert missing.status_code == 404
        assert missing.json() == {"detail": "Not Found"}
        posted = httpx.post(operator.metrics, content=b"\x00\xff", timeout=5)
        assert posted.status_code == 405
        assert posted.json() == {"detail": "Method Not Allowed"}
        assert "GET" in posted.headers["allow"]
        assert httpx.get(operator.metrics, timeout=5).status_code == 200  # and it still serves


@pytest.mark.slow
def test_reconcile_spans_and_metrics_reach_the_otlp_collector(kube_cluster: KubeCluster, tmp_path: Path):
    namespace = kube_cluster.fresh_namespace("metrics-otlp")
    with OtlpReceiver() as receiver:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, **FAST_EXPORT}
        with running_operator(kube_cluster, namespace, tmp_path / "operator.log", env):
            _reconciled(kube_cluster, namespace)
            span = receiver.wait_for_span(
                lambda s: s.name == "reconcile ModelAPI" and s.attributes.get("k8s.namespace.name") == namespace
            )
            assert span.attributes["kora.resource.name"] == "scripted"
            assert span.resource["kora.resource.kind"] == "Operator"
            points = receiver.wait_for_metric(
                "kora.operator.reconcile.duration",
                lambda p: p.attributes == {"kora.resource.kind": "ModelAPI", "kora.outcome": "ok"},
            )
            assert points[-1].unit == "s"
            assert points[-1].count >= 1


def _refused(*arguments: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``kora operator ARGUMENTS`` expected to stop at start-up (before it contacts any cluster)."""
    environment = clean_env(**(OPERATOR_ENV | {"KUBECONFIG": "/nonexistent/kubeconfig"} | (env or {})))
    return subprocess.run(
        [*KORA, "operator", *arguments], env=environment, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize("port", ["65536", "-1", "eighty", "80.5", ""])
def test_a_metrics_port_that_is_not_a_port_is_refused_naming_the_option(port: str):
    result = _refused("--metrics-port", port)
    assert result.returncode == EXIT_SETTINGS_ERROR
    assert "--metrics-port" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_metrics_port_already_taken_is_refused_naming_the_option():
    with bind_socket("0.0.0.0", 0) as taken:
        port = taken.getsockname()[1]
        result = _refused("--metrics-port", str(port), "--webhook-port", str(free_port()))
    assert result.returncode == EXIT_SETTINGS_ERROR
    assert f"kora operator: --metrics-port {port}: cannot listen on 0.0.0.0:{port}" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("arguments", "other"),
    [
        (["--metrics-port", "9443"], "--webhook-port"),
        (["--metrics-port", "18081", "--liveness", "http://0.0.0.0:18081/healthz"], "--liveness"),
    ],
)
def test_a_metrics_port_another_endpoint_uses_is_refused(arguments: list[str], other: str):
    result = _refused(*arguments)
    assert result.returncode == EXIT_SETTINGS_ERROR
    assert f"--metrics-port {arguments[1]}: {other} uses that port already" in result.stderr


def test_no_credentials_is_one_line_naming_what_is_missing(tmp_path):
    # Outside a pod, KUBECONFIG naming no file: what was looked for, and what to do; no traceback.
    result = _refused("--metrics-port", "0")
    assert result.returncode == EXIT_SETTINGS_ERROR
    assert result.stderr.splitlines() == [
        "kora operator: no Kubernetes credentials: not in a pod (no /var/run/secrets/kubernetes.io/serviceaccount/"
        "token) and no kubeconfig at /nonexistent/kubeconfig; set KUBECONFIG to a kubeconfig file, or run the "
        "operator in the cluster (deploy/helm)"
    ]
    # A kubeconfig that is there but is no kubeconfig: named, with the reason.
    broken = tmp_path / "kubeconfig"
    broken.write_text("clusters: [unclosed\n")
    result = _refused("--metrics-port", "0", env={"KUBECONFIG": str(broken)})
    assert result.returncode == EXIT_SETTINGS_ERROR
    [line] = result.stderr.splitlines()
    assert line.startswith(f"kora operator: KUBECONFIG={broken}: cannot be used (")
