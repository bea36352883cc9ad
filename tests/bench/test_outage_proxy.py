"""bench/outage_proxy.py keeps its port through a refusal: closed in refuse mode, the port was
free for another process's socket, and the proxy's return to "up" failed with EADDRINUSE
(suite18 saw it in tests/fuse/test_origin_outage.py)."""

from __future__ import annotations

import socket

import pytest

from bench.outage_proxy import OutageProxy


def test_a_refusing_proxy_refuses_and_keeps_its_port_for_the_way_back() -> None:
    with socket.socket() as origin:
        origin.bind(("127.0.0.1", 0))
        origin.listen(8)
        with OutageProxy(f"http://127.0.0.1:{origin.getsockname()[1]}") as proxy:
            socket.create_connection(("127.0.0.1", proxy.port), timeout=5).close()
            proxy.set_mode("refuse")
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
            with socket.socket() as other, pytest.raises(OSError):
                other.bind(("127.0.0.1", proxy.port))  # nobody else can take it meanwhile
            proxy.set_mode("up")
            socket.create_connection(("127.0.0.1", proxy.port), timeout=5).close()
