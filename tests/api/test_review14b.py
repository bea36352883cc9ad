"""review14b: local mode's owner check (audit14) under the shapes a connection can take.

Local mode answers a request only when the client's socket belongs to the server's user (or
root); tests/api/test_audit14.py checks IPv4 connections of one request each. Here: an IPv6
loopback bind, several requests on one kept-alive (and pipelined) connection, a socket handed
to the server's user by another user (SCM_RIGHTS), LabelX served beside the API, and binds
local mode must refuse. The other user is ``nobody`` (needs root, as test_audit14's tests).
"""

from __future__ import annotations

import array
import re
import socket
from collections.abc import Iterator

import pytest

from datahub.api import create_app
from datahub.api.server import ApiServer, check_bind
from datahub.catalog import open_catalog
from datahub.cli.serve_cmd import build_app
from datahub.config import Config
from datahub.errors import InvalidInput
from datahub.storage import StoreRegistry
from tests.api.test_audit14 import NOBODY, as_nobody, as_root, body, status


def _serve(config: Config, host: str, *, labelx: bool = False) -> Iterator[ApiServer]:
    config.api.local_mode, config.api.host, config.api.port = True, host, 0
    config.home_path.mkdir(parents=True, exist_ok=True)
    catalog = open_catalog(config.resolved_catalog_url)
    catalog.create_dataset("pets", description="the owner's")
    cache = None
    try:
        if labelx:
            app, cache = build_app(config, catalog, StoreRegistry(config), labelx=True)
        else:
            app = create_app(config, catalog=catalog)
        with ApiServer(app, config) as server:
            yield server
    finally:
        if cache is not None:
            cache.close()
        catalog.close()


@pytest.fixture
def served_v6(config: Config) -> Iterator[ApiServer]:
    """Local mode on ``::1``."""
    yield from _serve(config, "::1")


@pytest.fixture
def served_labelx(config: Config) -> Iterator[ApiServer]:
    """``datahub serve``'s app (the API, the browser and LabelX) in local mode on 127.0.0.1."""
    yield from _serve(config, "127.0.0.1", labelx=True)


def _exchange(
    family: int, host: str, port: int, requests: list[bytes], sock: socket.socket | None = None
) -> bytes:
    """Send ``requests`` pipelined on one connection (``sock``, or a new one); all the answers."""
    s = sock or socket.socket(family, socket.SOCK_STREAM)
    with s:
        if sock is None:
            s.connect((host, port))
        s.sendall(b"".join(requests))
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    return answer


def _get(path: str, *, close: bool) -> bytes:
    connection = "close" if close else "keep-alive"
    return f"GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: {connection}\r\n\r\n".encode()


def _statuses(answer: bytes) -> list[int]:
    """The status of each answer on a connection (a body runs straight into the next answer)."""
    return [int(code) for code in re.findall(rb"HTTP/1\.1 (\d{3}) ", answer)]


def test_ipv6_loopback_serves_its_own_user(served_v6: ApiServer) -> None:
    answer = _exchange(socket.AF_INET6, "::1", served_v6.port, [_get("/v1/datasets", close=True)])
    assert status(answer) == 200, answer
    assert [d["name"] for d in body(answer)] == ["pets"]


@as_root
def test_ipv6_loopback_refuses_another_user(served_v6: ApiServer) -> None:
    answer = as_nobody(
        lambda: _exchange(socket.AF_INET6, "::1", served_v6.port, [_get("/v1/datasets", close=True)])
    )
    assert status(answer) == 403, answer
    assert f"uid {NOBODY}" in body(answer)["error"]["message"]


@as_root
def test_every_request_of_a_kept_alive_pipelined_connection_is_checked(served_v6: ApiServer) -> None:
    """Three requests on one connection, the first a liveness probe (answered to anyone): the
    next two, on the same connection, are still another user's and refused."""
    asks = [
        _get("/healthz", close=False),
        _get("/v1/datasets", close=False),
        _get("/v1/datasets/pets", close=True),
    ]
    answer = as_nobody(lambda: _exchange(socket.AF_INET6, "::1", served_v6.port, asks))
    assert _statuses(answer) == [200, 403, 403], answer[:600]
    assert b'"pets"' not in answer
    mine = _exchange(socket.AF_INET6, "::1", served_v6.port, asks)
    assert _statuses(mine) == [200, 200, 200], mine[:600]


@as_root
def test_a_socket_another_user_made_stays_theirs_when_handed_over(served_v6: ApiServer) -> None:
    """``nobody`` connects, then passes the connected socket to the server's user (SCM_RIGHTS),
    who sends on it: the socket is still nobody's (the kernel keeps its creator as owner), so
    the request is refused; a user cannot lend another user's identity to a socket it made."""
    theirs, mine = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)

    def connect_and_hand_over() -> bytes:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.connect(("::1", served_v6.port))
            theirs.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [s.fileno()]))])
        return b"sent"

    assert as_nobody(connect_and_hand_over) == b"sent"
    _, fds, _, _ = socket.recv_fds(mine, 1, 1)
    received = socket.socket(fileno=fds[0])
    answer = _exchange(socket.AF_INET6, "", 0, [_get("/v1/datasets", close=True)], sock=received)
    theirs.close()
    mine.close()
    assert status(answer) == 403, answer
    assert f"uid {NOBODY}" in body(answer)["error"]["message"]


@as_root
def test_labelx_beside_the_api_refuses_another_user(served_labelx: ApiServer) -> None:
    """``datahub serve`` mounts LabelX under /labelx in the same app: its pages and API are
    behind the same check (the login page would otherwise let another user try passwords)."""
    for path in ("/labelx/", "/labelx/login", "/labelx/api/projects"):
        answer = as_nobody(
            lambda p=path: _exchange(socket.AF_INET, "127.0.0.1", served_labelx.port, [_get(p, close=True)])
        )
        assert status(answer) == 403, (path, answer[:300])
    mine = _exchange(socket.AF_INET, "127.0.0.1", served_labelx.port, [_get("/labelx/login", close=True)])
    assert status(mine) == 200, mine[:300]


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "::ffff:127.0.0.1", "10.0.0.1", "localhost.example"])
def test_local_mode_is_refused_on_anything_but_loopback(config: Config, host: str) -> None:
    """A dual-stack wildcard (``::``) takes v4-mapped loopback callers but every other machine's
    too; ``::ffff:127.0.0.1`` is refused as well, as its callers' sockets are IPv4 ones that the
    owner lookup (by an IPv6 four-tuple) would not find."""
    config.api.local_mode, config.api.host = True, host
    with pytest.raises(InvalidInput):
        check_bind(config)
