"""Where ``kora operator`` serves ``/metrics`` (``--metrics-port``): 0 is off, another endpoint's port is refused
naming both options, the webhook's port is free once the webhook is off, and a bound socket listens on it."""

import pytest

from kora.core.net import free_port
from kora.operator.cli import METRICS_HOST, _metrics_socket

pytestmark = pytest.mark.unit


def test_port_zero_serves_nothing():
    assert _metrics_socket(0, 9443, "http://0.0.0.0:8081/healthz") is None


@pytest.mark.parametrize(
    ("webhook_port", "liveness", "other"),
    [(4321, None, "--webhook-port"), (None, "http://0.0.0.0:4321/healthz", "--liveness")],
)
def test_another_endpoints_port_is_refused(webhook_port: int | None, liveness: str | None, other: str):
    with pytest.raises(ValueError, match=f"^--metrics-port 4321: {other} uses that port already"):
        _metrics_socket(4321, webhook_port, liveness)


@pytest.mark.parametrize("liveness", [None, "http://0.0.0.0/healthz", "http://[::1/healthz", "not a url"])
def test_the_webhook_port_is_free_without_the_webhook_and_a_liveness_url_without_port_takes_none(
    liveness: str | None,
):
    port = free_port()
    sock = _metrics_socket(port, None, liveness)
    assert sock is not None
    with sock:
        assert sock.getsockname()[:2] == (METRICS_HOST, port)
