"""Loopback sockets and ports, for the local runtime, the CLI servers, tests and benchmarks; URL checks."""

from __future__ import annotations

import random
import socket
from pathlib import Path
from typing import Final
from urllib.parse import urlparse

#: Seconds an outbound HTTP client keeps an idle pooled connection for reuse. Below the 5 s after which uvicorn
#: (every Kora server, and most Python model servers) closes an idle keep-alive connection, with room for a
#: loaded event loop's lag: with equal timeouts a request sent on a pooled connection races the server's close
#: and fails ("Can not write request body", a reset) although the server is well.
POOL_KEEPALIVE_SECONDS: Final = 2.0


#: How many ports below the ephemeral range :func:`free_port` draws from.
PORTS_BELOW_EPHEMERAL: Final = 10_000
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: Linux's default first ephemeral port, when the range cannot be read.
_EPHEMERAL_DEFAULT_START: Final = 32768


def _ephemeral_start() -> int:
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return _EPHEMERAL_DEFAULT_START


def is_http_url(value: str) -> bool:
    """True when ``value`` is an absolute ``http``/``https`` URL with a host."""
    parsed = urlparse(value)
    return parsed.scheme in {"http", "https"} and bool(parsed.netloc)


def is_postgres_url(value: str) -> bool:
    """True when ``value`` is a ``postgresql://`` (or ``postgres://``) connection URI naming a server: a host in
    the authority (``postgresql://user:pw@host:5432/db``) or a ``host`` query parameter (a Unix socket
    directory), with a numeric port if any."""
    try:
        parsed = urlparse(value)
        parsed.port  # noqa: B018 - raises ValueError for a port that is no number
    except ValueError:
        return False
    has_host = bool(parsed.hostname) or any(part.startswith("host=") for part in parsed.query.split("&"))
    return parsed.scheme in {"postgresql", "postgres"} and has_host


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
    """A TCP port on ``host`` that was free a moment ago, for a server another process will bind. Where a socket
    can be handed over, prefer :func:`bind_socket`.

    It is drawn at random below the kernel's ephemeral range (``net.ipv4.ip_local_port_range``), from
    :data:`PORTS_BELOW_EPHEMERAL`: a port the OS picks for ``bind(0)`` comes from that range, and so does the
    local port of every outbound connection, so on a busy machine such a port could be taken by some process's
    connection between this call and the server's bind (seen: a test agent failing with "address already in
    use"). Below the range only an explicit bind can take it. Falls back to the OS's pick when no port there is
    free or the range leaves no room below it.
    """
    low = _ephemeral_start()
    start = max(low - PORTS_BELOW_EPHEMERAL, 1024)
    if low - start >= 1000:
        for _attempt in range(50):
            port = random.randrange(start, low)
            try:
                bind_socket(host, port).close()
            except OSError:
                continue
            return port
    sock = bind_socket(host, 0)
    try:
        return int(sock.getsockname()[1])
    finally:
        sock.close()
