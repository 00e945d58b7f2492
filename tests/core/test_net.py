"""kora.core.net.free_port: a port that can be bound, drawn below the ephemeral range an outbound connection could
take it from."""

from __future__ import annotations

import pytest

from kora.core import net

pytestmark = pytest.mark.unit


def test_a_free_port_lies_below_the_ephemeral_range_and_binds() -> None:
    low = net._ephemeral_start()
    ports = {net.free_port() for _ in range(20)}
    assert all(max(low - net.PORTS_BELOW_EPHEMERAL, 1024) <= port < low for port in ports)
    for port in ports:
        net.bind_socket("127.0.0.1", port).close()


def test_without_room_below_the_range_the_os_picks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(net, "_ephemeral_start", lambda: 1500)
    port = net.free_port()
    net.bind_socket("127.0.0.1", port).close()
    assert port > 1500
