"""Body limits on a real uvicorn server on loopback, driven by raw sockets.

A slow body is refused with 408 and its connection closed; bodies in flight beyond the
process-wide budget get 503 with Retry-After. Either way nothing is written.
"""

from __future__ import annotations

import json
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


def commit_body(n: int) -> bytes:
    changes = [
        {
            "op": "put",
            "record": {"key": f"img/{i:05d}.jpg", "url": f"s3://b/img/{i}.jpg", "etag": f"e{i}", "size": 1},
        }
        for i in range(n)
    ]
    return json.dumps({"changes": changes}).encode()


@pytest.fixture(params=[0.5])
def served(config: Config, request) -> Iterator[tuple[ApiServer, str]]:
    """The server with a body-read deadline of ``request.param`` seconds."""
    config.api.port = 0
    config.api.local_mode = False
    config.api.max_body_bytes = 64 * 1024
    config.api.max_inflight_body_bytes = 100 * 1024
    config.api.body_read_timeout = request.param
    config.home_path.mkdir(parents=True, exist_ok=True)
    catalog = open_catalog(config.resolved_catalog_url)
    token = issue_token(catalog.store, "root", admin=True)[0]
    catalog.create_dataset("pets")
    with ApiServer(create_app(config, catalog=catalog), config) as server:
        yield server, token
    catalog.close()


def headers(token: str, length: int) -> bytes:
    return (
        "POST /v1/datasets/pets/commits HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {token}\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def read_response(conn: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (or the guard expires)."""
    conn.settimeout(GUARD)
    data = b""
    while chunk := conn.recv(65536):
        data += chunk
    return data


def head(server: ApiServer, token: str) -> int:
    r = httpx.get(f"{server.url}/v1/datasets/pets", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200
    return r.json()["head"]


def test_a_trickled_body_gets_408_the_connection_closes_and_nothing_is_written(served):
    server, token = served
    body = commit_body(3)
    with socket.create_connection(("127.0.0.1", server.port), timeout=GUARD) as conn:
        conn.sendall(headers(token, len(body)) + body[:10])
        # A few more bytes, slowly, then the sender stalls: the body never completes, so only
        # the deadline can end the request. (Bytes still arriving when the server closes
        # would make its kernel answer with a reset, so the trickle stops as soon as the
        # server has answered.)
        for byte in body[10:15]:
            if select.select([conn], [], [], 0.02)[0]:
                break
            conn.sendall(bytes([byte]))
        data = read_response(conn)  # returns only because the server closes the connection
    response_head, _, payload = data.partition(b"\r\n\r\n")
    assert response_head.startswith(b"HTTP/1.1 408"), data[:200]
    assert b"connection: close" in response_head.lower()
    error = json.loads(payload)["error"]
    assert error["code"] == "request_timeout" and "api.body_read_timeout" in error["message"]
    assert error["details"]["received_bytes"] >= 10
    assert head(server, token) == 0


def test_a_body_sent_in_time_is_not_refused(served):
    server, token = served
    body = commit_body(3)
    with socket.create_connection(("127.0.0.1", server.port), timeout=GUARD) as conn:
        conn.sendall(headers(token, len(body)) + body[:10])
        conn.sendall(body[10:])
        assert conn.recv(65536).startswith(b"HTTP/1.1 201")
    assert head(server, token) == 1


@pytest.mark.parametrize("served", [60.0], indirect=True)  # the holder must not time out
def test_bodies_beyond_the_in_flight_budget_get_503_with_retry_after(served):
    server, token = served
    auth = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    url = f"{server.url}/v1/datasets/pets/commits"
    big = commit_body(500)
    assert 45 * 1024 < len(big) < 64 * 1024  # fits max_body_bytes, not next to the held 60 KiB
    with socket.create_connection(("127.0.0.1", server.port), timeout=GUARD) as holder:
        # 60 KiB declared and still arriving: reserved against the 100 KiB budget.
        holder.sendall(headers(token, 60 * 1024) + b'{"changes": [')
        # Wait until the server has read the holder's headers: a 50 KiB body that is not a
        # commit (422 once admitted, so harmless) is refused while the reservation stands.
        deadline = time.monotonic() + GUARD
        while httpx.post(url, content=b" " * 50 * 1024, headers=auth).status_code != 503:
            assert time.monotonic() < deadline, "the held body was never reserved"
            time.sleep(0.02)
        r = httpx.post(url, content=big, headers=auth)
        assert r.status_code == 503, r.text
        assert r.headers["Retry-After"].isdigit()
        error = r.json()["error"]
        assert error["code"] == "busy" and "api.max_inflight_body_bytes" in error["message"]
        assert head(server, token) == 0
        r = httpx.post(url, content=commit_body(2), headers=auth)  # fits next to the held 60 KiB
        assert r.status_code == 201, r.text
    # The holder went away: its reservation is returned and the big commit fits.
    deadline = time.monotonic() + GUARD
    while (r := httpx.post(url, content=big, headers=auth)).status_code == 503:
        assert time.monotonic() < deadline, "the reservation was never returned"
        time.sleep(0.02)
    assert r.status_code == 201, r.text
    assert head(server, token) == 2
