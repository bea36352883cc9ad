"""review22b: a caller with no token cannot hold the API's request-body budget.

The body limits reserve a request's declared ``Content-Length`` against the process's
in-flight budget (``api.max_inflight_body_bytes``) as the request arrives, and hold it while
the body arrives, up to ``api.body_read_timeout``. The token was looked at only by the route,
after the body: so anyone reaching the server, with no token, declared large bodies, sent
nothing, and every commit and writer-lease renewal of the deployment got 503 meanwhile (a node
that cannot renew its lease within its ttl fences: its workspace's writes fail). A real uvicorn
server on loopback, driven by raw sockets (the holder's body never arrives).
"""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from datahub.api import create_app
from datahub.api.server import ApiServer
from datahub.api.tokens import issue_token
from datahub.catalog import open_catalog
from datahub.config import Config

GUARD = 30.0  # seconds: only a hang guard, never a timing assertion
KIB = 1024


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ApiServer, str]]:
    """An --auth server whose budget holds one 60 KiB body and not a second 50 KiB one; bodies
    may take a minute to arrive, so a held one stays held for the whole test."""
    home = tmp_path_factory.mktemp("review22b-budget")
    config = Config(home=str(home))
    config.api.port = 0
    config.api.local_mode = False
    config.api.max_body_bytes = 64 * KIB
    config.api.max_inflight_body_bytes = 100 * KIB
    config.api.body_read_timeout = 60.0
    catalog = open_catalog(config.resolved_catalog_url)
    token = issue_token(catalog.store, "root", admin=True)[0]
    catalog.create_dataset("pets")
    try:
        with ApiServer(create_app(config, catalog=catalog), config) as server:
            yield server, token
    finally:
        catalog.close()


def _hold(server: ApiServer, path: str, length: int, authorization: str = "") -> socket.socket:
    """A request declaring ``length`` bytes of body and sending none of them."""
    conn = socket.create_connection(("127.0.0.1", server.port), timeout=GUARD)
    auth = f"Authorization: {authorization}\r\n" if authorization else ""
    conn.sendall(
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{auth}"
        f"Content-Length: {length}\r\n\r\n".encode()
    )
    return conn


def _answered(conn: socket.socket) -> bytes:
    """What the server has answered on ``conn`` so far ("" while it waits for the body)."""
    return conn.recv(65536) if select.select([conn], [], [], 0)[0] else b""


def _until_closed(conn: socket.socket) -> bytes:
    """The rest of the answer on ``conn``, to the server's close (its answer says
    ``connection: close``; a server that never closes fails at the socket's GUARD timeout)."""
    rest = b""
    while chunk := conn.recv(65536):
        rest += chunk
    return rest


@pytest.mark.parametrize("authorization", ["", "Bearer dh_forged"])
def test_an_api_body_without_a_valid_token_is_refused_before_it_holds_the_budget(served, authorization):
    server, token = served
    url = f"{server.url}/v1/datasets/pets/commits"
    mine = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    holder = _hold(server, "/v1/datasets/pets/commits", 60 * KIB, authorization)
    try:
        deadline = time.monotonic() + GUARD
        while not (answer := _answered(holder)):
            # 50 KiB of spaces: not a commit (422 once admitted, so nothing is written)
            r = httpx.post(url, content=b" " * 50 * KIB, headers=mine)
            assert r.status_code != 503, "a caller with no valid token holds the API's body budget"
            assert r.status_code == 422, r.text
            assert time.monotonic() < deadline, "the token-less body was never answered"
        answer += _until_closed(holder)  # the head and the body may come in two segments
        assert answer.startswith(b"HTTP/1.1 401"), answer[:200]
        assert b"unauthenticated" in answer and b"connection: close" in answer.lower()
    finally:
        holder.close()


def test_bodies_of_the_sign_in_form_are_held_apart_from_the_apis(served):
    """The browser's sign-in form and LabelX authenticate their own callers, after the body:
    what such requests hold is counted in a budget of their own (api.max_body_bytes), so the
    API's commits are admitted whatever they hold."""
    server, token = served
    mine = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    holder = _hold(server, "/login", 60 * KIB)
    try:
        deadline = time.monotonic() + GUARD  # until the server reserved the holder's body
        while httpx.post(f"{server.url}/login", content=b"x" * 50 * KIB, headers=form).status_code != 503:
            assert time.monotonic() < deadline, "the held sign-in body was never reserved"
            time.sleep(0.02)
        r = httpx.post(f"{server.url}/v1/datasets/pets/commits", content=b" " * 50 * KIB, headers=mine)
        assert r.status_code == 422, r.text  # admitted: the API's budget is whole
    finally:
        holder.close()
