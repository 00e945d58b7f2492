"""Loopback sockets and ports, for the local runtime, the CLI servers, tests and benchmarks; URL checks."""

from __future__ import annotations

import socket
from typing import Final
from urllib.parse import urlparse

#: Seconds an outbound HTTP client keeps an idle pooled connection for reuse. Below the 5 s after which uvicorn
#: (every Kora server, and most Python model servers) closes an idle keep-alive connection, with room for a
#: loaded event loop's lag: with equal timeouts a request sent on a pooled connection races the server's close
#: and fails ("Can not write request body", a reset) although the server is well.
POOL_KEEPALIVE_SECONDS: Final = 2.0


def is_http_url(value: str) -> bool:
    """True when ``value`` is an absolute ``http``/``https`` URL with a host."""
    parsed = urlparse(value)
    return parsed.scheme in {"http", "https"} and bool(parsed.netloc)


def bind_socket(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: a free port chosen by the OS).

    Binding before starting a server avoids the race of "find a free port, then bind it".
    Raises ``OSError`` if the address is taken.
    """
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that was free a moment ago (the OS picks it). A small race remains until the
    caller's process binds it; where a socket can be handed over, prefer :func:`bind_socket`."""
    sock = bind_socket(host, 0)
    try:
        port: int = sock.getsockname()[1]
        return port
    finally:
        sock.close()
