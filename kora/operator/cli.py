"""``kora operator``: reconcile Kora's resources on a Kubernetes cluster (docs/operator.md).

    kora operator [--namespace NS ...] [--webhook-port N] [--webhook-host H] [--webhook-service NS/NAME]
                  [--no-webhook] [--liveness URL] [--metrics-port N] [--log-level L]

Credentials: the pod's service account in a cluster, else ``KUBECONFIG`` (or ``~/.kube/config``). Settings
come from the environment (:mod:`kora.operator.settings`, as the Helm chart sets them). Exit codes: 0 after
a clean shutdown (SIGTERM, Ctrl-C), 2 for bad settings or options (one message naming each bad variable, or
the option: a ``--metrics-port`` out of range, taken by another process or by the webhook or liveness endpoint)
and for missing or unusable credentials (one line saying what was looked for: :mod:`kora.operator.credentials`).

``GET /metrics`` (Prometheus text, docs/telemetry.md) is served over plain HTTP on ``0.0.0.0:--metrics-port``
(:data:`DEFAULT_METRICS_PORT`; 0 turns it off).
"""

# No ``from __future__ import annotations``: Typer evaluates the option annotations, which name the ``typer``
# imported inside ``cli`` (imported there to keep ``kora`` start-up light).
import asyncio
import logging
import socket
import sys
from enum import StrEnum
from typing import Annotated
from urllib.parse import urlparse

from kora.core.command import run_command
from kora.core.settings_errors import SettingsError

#: Exit code for invalid settings or options.
EXIT_SETTINGS_ERROR = 2
#: Port of ``GET /metrics`` without ``--metrics-port`` (kopf's liveness endpoint is on 8081 in the chart).
DEFAULT_METRICS_PORT = 8080
#: Interface ``/metrics`` listens on: every one, as kopf's webhook server does (a pod's scraper calls its IP).
METRICS_HOST = "0.0.0.0"


class LogLevel(StrEnum):
    """``--log-level`` values."""

    DEBUG = "DEBUG"
    INFO = "INFO"
    WARNING = "WARNING"
    ERROR = "ERROR"


def _service(value: str | None) -> tuple[str, str] | None:
    if value is None:
        return None
    namespace, _, name = value.partition("/")
    if not namespace or not name:
        raise ValueError(f"--webhook-service must be NAMESPACE/NAME, got {value!r}")
    return namespace, name


def _metrics_socket(port: int, webhook_port: int | None, liveness: str | None) -> socket.socket | None:
    """The listening socket of ``/metrics`` on ``port`` (None when 0); ``ValueError`` naming ``--metrics-port``
    when another endpoint of the operator has that port or the address cannot be bound."""
    from kora.core.net import bind_socket

    if port == 0:
        return None
    for option, taken in (("--webhook-port", webhook_port), ("--liveness", _port_of(liveness))):
        if port == taken:
            raise ValueError(f"--metrics-port {port}: {option} uses that port already; choose another one")
    try:
        return bind_socket(METRICS_HOST, port)
    except OSError as error:
        raise ValueError(f"--metrics-port {port}: cannot listen on {METRICS_HOST}:{port}: {error}") from error


def _port_of(url: str | None) -> int | None:
    try:
        return urlparse(url).port if url else None
    except ValueError:  # kopf refuses a malformed --liveness itself
        return None


def serve(
    namespaces: list[str],
    webhook: bool,
    webhook_port: int,
    webhook_host: str,
    webhook_service: str | None,
    liveness: str | None,
    log_level: str,
    metrics_port: int = DEFAULT_METRICS_PORT,
) -> int:
    """Load the settings and run the operator until stopped; returns the exit code."""
    from kora.core.telemetry import setup_telemetry
    from kora.operator.credentials import load_kube_config
    from kora.operator.settings import load_operator_settings

    metrics_socket: socket.socket | None = None
    try:
        settings = load_operator_settings()
        service = _service(webhook_service)
        metrics_socket = _metrics_socket(metrics_port, webhook_port if webhook else None, liveness)
        kube_config = load_kube_config()
        telemetry = setup_telemetry("Operator", "kora-operator", component="kora operator")
    except (SettingsError, ValueError) as error:
        if metrics_socket is not None:
            metrics_socket.close()
        print(error if isinstance(error, SettingsError) else f"kora operator: {error}", file=sys.stderr)
        return EXIT_SETTINGS_ERROR
    logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    quiet = ("httpx", "httpx2", "httpcore", "httpcore2", "aiohttp.access", "kopf.objects", "kopf.activities.probe")
    for noisy in quiet:
        logging.getLogger(noisy).setLevel(logging.WARNING)

    from kora.operator.main import MetricsOptions, WebhookOptions, run_operator

    options = WebhookOptions(port=webhook_port, host=webhook_host, service=service) if webhook else None
    metrics = None if metrics_socket is None else MetricsOptions(metrics_socket, telemetry.registry)
    try:
        asyncio.run(
            run_operator(
                settings,
                namespaces=namespaces,
                webhook=options,
                liveness=liveness,
                metrics=metrics,
                kube_config=kube_config,
            )
        )
    except KeyboardInterrupt:
        return 0
    finally:
        telemetry.shutdown()
    return 0


def cli(argv: list[str]) -> int:
    """Parse ``kora operator`` options with Typer and run :func:`serve`; returns the exit code."""
    import typer

    def operator(
        namespace: Annotated[
            list[str] | None, typer.Option(help="Watch only this namespace (repeatable; default: all namespaces).")
        ] = None,
        webhook: Annotated[
            bool, typer.Option(help="Serve the validating admission webhook and register it with the API server.")
        ] = True,
        webhook_port: Annotated[int, typer.Option(min=1, max=65535, help="Port of the admission webhook.")] = 9443,
        webhook_host: Annotated[
            str, typer.Option(help="Address the API server calls the webhook at (without --webhook-service).")
        ] = "127.0.0.1",
        webhook_service: Annotated[
            str | None, typer.Option(help="NAMESPACE/NAME of the Service in front of the webhook (in a cluster).")
        ] = None,
        liveness: Annotated[
            str | None, typer.Option(help="Liveness endpoint, e.g. http://0.0.0.0:8081/healthz.")
        ] = None,
        metrics_port: Annotated[
            int,
            typer.Option(min=0, max=65535, help="Port of GET /metrics (Prometheus text, plain HTTP); 0: off."),
        ] = DEFAULT_METRICS_PORT,
        log_level: Annotated[
            LogLevel, typer.Option(case_sensitive=False, help="Log level (DEBUG shows every reconcile).")
        ] = LogLevel.INFO,
    ) -> int:
        """Reconcile Agents, ModelAPIs, MCPServers and MemoryStores (settings from the environment)."""
        return serve(
            namespace or [],
            webhook,
            webhook_port,
            webhook_host,
            webhook_service,
            liveness,
            log_level.value,
            metrics_port,
        )

    return run_command(operator, argv, "kora operator")
