"""``kora operator`` as a real process against the test control plane (tests/support/kube.py).

:func:`running_operator` starts the CLI with the cluster's kubeconfig (every endpoint on a free port), waits for
its liveness endpoint, and stops it (SIGTERM) on exit; its log is kept in the test's temporary directory and
printed on failure.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from lightkube import ApiError, Client

from kora.core.net import free_port
from tests.support.eventually import eventually
from tests.support.kube import KubeCluster, kora_resource

REPO = Path(__file__).resolve().parents[2]

#: Settings every test operator gets unless a test overrides them.
OPERATOR_ENV: dict[str, str] = {"KORA_IMAGE": "registry.example/kora:test"}

JsonObject = dict[str, object]
#: Starts of an operator whose metrics port was taken before it could bind it (see :func:`start_operator`).
PORT_ATTEMPTS = 3


@dataclass
class OperatorProcess:
    """A running ``kora operator``; ``log`` is its output file, ``metrics`` the URL of its ``/metrics`` (None when
    it serves none)."""

    process: subprocess.Popen[bytes]
    log: Path
    liveness: str
    metrics: str | None = None

    def output(self) -> str:
        """Everything the operator printed so far."""
        return self.log.read_text(errors="replace")

    def stop(self) -> int:
        """SIGTERM, then wait (SIGKILL after 20 s); the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def start_operator(
    cluster: KubeCluster, namespace: str, log: Path, env: Mapping[str, str] | None = None, *args: str
) -> OperatorProcess:
    """Start ``kora operator --namespace NAMESPACE ARGS`` (webhook, liveness and ``/metrics`` on free ports; the
    default metrics port would collide between operators) and wait until its liveness endpoint answers. Raises
    ``AssertionError`` with its log if it exits or does not come up.

    A port free a moment ago can be taken before the operator binds it (an outbound connection of any process
    on the machine may get it as its ephemeral port): when the operator stops at start-up because its metrics
    port is taken, it is started again on other ports, up to :data:`PORT_ATTEMPTS` times."""
    environment = {**cluster.env(), **OPERATOR_ENV, **(env or {})}
    for attempt in range(1, PORT_ATTEMPTS + 1):
        liveness = f"http://127.0.0.1:{free_port()}/healthz"
        metrics_port = free_port()
        arguments = [
            *("--namespace", namespace, "--webhook-port", str(free_port()), "--liveness", liveness),
            *("--metrics-port", str(metrics_port), *args),
        ]
        try:
            return launch_operator(arguments, environment, log, liveness, metrics=metrics_url(metrics_port))
        except AssertionError as error:
            if attempt == PORT_ATTEMPTS or f"--metrics-port {metrics_port}: cannot listen" not in str(error):
                raise
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


def metrics_url(port: int) -> str:
    """The URL of the ``/metrics`` of an operator started with ``--metrics-port PORT`` (it listens on every
    interface)."""
    return f"http://127.0.0.1:{port}/metrics"


def launch_operator(
    arguments: Sequence[str], environment: Mapping[str, str], log: Path, liveness: str, *, metrics: str | None = None
) -> OperatorProcess:
    """Start ``kora operator ARGUMENTS`` (this checkout's code, ``environment`` exactly, which must point
    ``KUBECONFIG`` at a cluster) and wait until ``liveness`` (its ``--liveness`` URL) answers; ``metrics`` is the
    URL of its ``/metrics`` as ``ARGUMENTS`` set it. Raises ``AssertionError`` with its log if it exits or does not
    come up within 60 s."""
    command = [sys.executable, "-m", "kora.cli", "operator", *arguments]
    with log.open("ab") as sink:
        process = subprocess.Popen(
            command, env={**environment, "PYTHONPATH": str(REPO)}, stdout=sink, stderr=subprocess.STDOUT, cwd=REPO
        )
    running = OperatorProcess(process, log, liveness, metrics)

    def alive() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"kora operator exited with {process.returncode}:\n{running.output()}")
        return httpx.get(liveness, timeout=1).status_code == 200

    try:
        eventually(
            alive, f"kora operator answering {liveness}", every=0.1, tolerate=(httpx.HTTPError,), explain=running.output
        )
    except AssertionError:
        running.stop()
        raise
    return running


@contextmanager
def supervised(operator: OperatorProcess) -> Iterator[OperatorProcess]:
    """Yield ``operator`` and stop it on exit (its log printed when the block failed)."""
    try:
        yield operator
    except BaseException:
        print(operator.output()[-20_000:], file=sys.stderr)
        raise
    finally:
        operator.stop()


def running_operator(
    cluster: KubeCluster, namespace: str, log: Path, env: Mapping[str, str] | None = None, *args: str
) -> AbstractContextManager[OperatorProcess]:
    """:func:`start_operator` (``args``: more ``kora operator`` options), stopped on exit (its log printed
    when the block failed)."""
    return supervised(start_operator(cluster, namespace, log, env, *args))


def resource_status(client: Client, kind: str, name: str, namespace: str) -> JsonObject:
    """``status`` of Kora resource ``kind/name`` (``{}`` when it has none or does not exist)."""
    try:
        found = client.get(kora_resource(kind), name, namespace=namespace)
    except ApiError as error:
        if error.status.code == 404:
            return {}
        raise
    status = found.get("status")
    return dict(status) if isinstance(status, dict) else {}


def wait_for(what: str, probe: Callable[[], object], within: float = 60.0) -> object:
    """:func:`~tests.support.eventually.eventually` for the API server: ``probe`` polled every 100 ms."""
    return eventually(probe, what, within=within, every=0.1)


def phase_is(client: Client, kind: str, name: str, namespace: str, phase: str) -> Callable[[], JsonObject | None]:
    """A probe for :func:`wait_for`: the status once its phase is ``phase``."""

    def probe() -> JsonObject | None:
        status = resource_status(client, kind, name, namespace)
        return status if status.get("phase") == phase else None

    return probe


def environment_of(container: Mapping[str, object]) -> dict[str, object]:
    """A container's ``env`` as ``name -> value`` (or ``name -> valueFrom`` mapping)."""
    entries = container.get("env") or []
    assert isinstance(entries, list)
    return {str(e["name"]): e.get("value", e.get("valueFrom")) for e in entries}


__all__ = [
    "OPERATOR_ENV",
    "OperatorProcess",
    "environment_of",
    "launch_operator",
    "metrics_url",
    "phase_is",
    "resource_status",
    "running_operator",
    "start_operator",
    "supervised",
    "wait_for",
]
