"""Running the API: loopback-only local mode, busy ports, Nagle off, clean start and stop."""

from __future__ import annotations

import socket

import httpx
import pytest

from datahub.api import create_app
from datahub.api.server import ApiServer, bind_socket, check_bind, is_loopback
from datahub.errors import Conflict, InvalidInput


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.53", "::1", "localhost"])
def test_loopback_addresses(host):
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.1", "example.org"])
def test_local_mode_is_refused_off_loopback(config, host):
    config.api.host = host
    with pytest.raises(InvalidInput, match="refusing local mode"):
        check_bind(config)
    config.api.local_mode = False
    check_bind(config)  # with authentication any address is fine


def test_busy_port_is_a_clear_conflict():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        with pytest.raises(Conflict, match=f"port {port} on 127.0.0.1 is already in use"):
            bind_socket("127.0.0.1", port)


def test_an_address_not_of_this_machine_says_what_to_use():
    """192.0.2.1 (TEST-NET-1) is on no interface here: the bind fails before any packet is sent."""
    with pytest.raises(
        InvalidInput, match=r"192\.0\.2\.1 is not an address of this machine: use 127\.0\.0\.1"
    ):
        bind_socket("192.0.2.1", 0)


def test_server_answers_with_nagle_off_and_stops(config):
    config.api.port = 0
    server = ApiServer(create_app(config), config)
    # asyncio only disables Nagle on sockets created as IPPROTO_TCP; without it each response
    # waited ~40 ms for a delayed ACK.
    assert server._socket.proto == socket.IPPROTO_TCP
    with server:
        with socket.create_connection(("127.0.0.1", server.port)) as conn:
            conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            assert b"200 OK" in conn.recv(4096)
        assert httpx.get(f"{server.url}/healthz").json() == {"status": "ok"}
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{server.url}/healthz", timeout=2)
