"""Local mode answers its own user's programs, not every account of the machine (audit14).

Local mode (``make run``, ``datahub serve`` on 127.0.0.1, the embedded default) has no
credentials: every caller is the global admin ``local``. The catalog file and the cache are
the server's user's alone (0600, docs/cache.md "Who may read the cache's files"), yet every
other account of a shared machine reaches 127.0.0.1 as well, and over HTTP it listed, read
and wrote every dataset (and, as a local admin, could commit ``file://`` or ``s3://`` records
that the server then reads with its user's files and keys). Now a request whose connection
another user holds is 403, found by the client socket's owner in the kernel's socket table.

The other user is ``nobody``, reached from a forked child that drops to it (the tests need
root for that, as the suite's other ``nobody`` checks do).
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable, Iterator

import pytest

from datahub.api import create_app
from datahub.api.server import ApiServer
from datahub.catalog import open_catalog
from datahub.config import Config
from datahub.errors import DatasetNotFound

NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="acting as another user needs root")


@pytest.fixture
def served(config: Config) -> Iterator[tuple[ApiServer, object]]:
    """``datahub serve``'s server, in local mode on 127.0.0.1 (a free port), dataset ``pets``."""
    config.api.local_mode, config.api.host, config.api.port = True, "127.0.0.1", 0
    config.home_path.mkdir(parents=True, exist_ok=True)
    catalog = open_catalog(config.resolved_catalog_url)
    catalog.create_dataset("pets", description="the owner's")
    try:
        with ApiServer(create_app(config, catalog=catalog), config) as server:
            yield server, catalog
    finally:
        catalog.close()


def request(port: int, method: str, path: str, body: bytes = b"", headers: str = "") -> bytes:
    """One HTTP/1.1 request on a new connection; the whole answer (the server closes it)."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(_request(method, path, body, headers))
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    return answer


def _request(method: str, path: str, body: bytes, headers: str) -> bytes:
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n{headers}"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def as_nobody(act: Callable[[], bytes]) -> bytes:
    """What ``act`` returns when run by user ``nobody`` (a forked child that drops to it)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            os.write(write, act())
        except BaseException as exc:
            os.write(write, f"child failed: {exc!r}".encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        out = pipe.read()
    os.waitpid(pid, 0)
    return out


def status(answer: bytes) -> int:
    assert answer.startswith(b"HTTP/1.1 "), answer[:200]
    return int(answer.split()[1])


def body(answer: bytes) -> dict:
    return json.loads(answer.partition(b"\r\n\r\n")[2])


@as_root
def test_another_user_of_the_machine_neither_reads_nor_writes(served) -> None:
    server, catalog = served
    listed = as_nobody(lambda: request(server.port, "GET", "/v1/datasets"))
    assert status(listed) == 403, listed
    error = body(listed)["error"]
    assert error["code"] == "access_denied"
    assert f"another user of this machine (uid {NOBODY})" in error["message"]
    assert "pets" not in listed.decode()
    created = as_nobody(lambda: request(server.port, "POST", "/v1/datasets", b'{"name": "planted"}'))
    assert status(created) == 403, created
    with pytest.raises(DatasetNotFound):
        catalog.get_dataset("planted")
    # the browser's pages too (they read through the same app)
    assert status(as_nobody(lambda: request(server.port, "GET", "/datasets/pets"))) == 403
    # liveness stays open to everyone: it names nothing
    assert status(as_nobody(lambda: request(server.port, "GET", "/healthz"))) == 200


def test_the_servers_own_user_is_served(served) -> None:
    server, _ = served
    answer = request(server.port, "GET", "/v1/datasets")
    assert status(answer) == 200, answer
    assert [d["name"] for d in body(answer)] == ["pets"]


@as_root
def test_a_forwarded_for_header_does_not_stand_for_the_socket(served) -> None:
    """uvicorn takes X-Forwarded-For from loopback callers by default; in local mode the client
    must be the socket itself, or any user could name an address that is checked as another."""
    server, _ = served
    for forwarded in ("testclient", "127.0.0.1"):
        answer = as_nobody(
            lambda f=forwarded: request(
                server.port, "GET", "/v1/datasets", headers=f"X-Forwarded-For: {f}\r\n"
            )
        )
        assert status(answer) == 403, (forwarded, answer)


@as_root
def test_a_request_whose_sender_hung_up_is_refused(served) -> None:
    """A socket closed right after its request is an orphan, which the kernel lists as
    nobody's (uid 0, no inode): it must not pass as root's, or any user's writes got through
    unanswered."""
    server, catalog = served

    def fire_and_forget() -> bytes:
        with socket.create_connection(("127.0.0.1", server.port)) as s:
            s.sendall(_request("POST", "/v1/datasets", b'{"name": "planted"}', ""))
        return b"sent"

    assert as_nobody(fire_and_forget) == b"sent"
    counted = _answered_post(server.port)
    assert counted == {"403"}, counted
    with pytest.raises(DatasetNotFound):
        catalog.get_dataset("planted")


def _answered_post(port: int, deadline: float = 60.0) -> set[str]:
    """The statuses of the POSTs the server has answered, once it has answered one (from its
    own /metrics, so the test waits for the request, not for a time)."""
    give_up = time.monotonic() + deadline
    while time.monotonic() < give_up:
        text = body_text(request(port, "GET", "/metrics"))
        found = {
            line.partition('status="')[2].partition('"')[0]
            for line in text.splitlines()
            if line.startswith("datahub_http_requests_total") and 'method="POST"' in line
        }
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError("the server never answered the POST")


def body_text(answer: bytes) -> str:
    return answer.partition(b"\r\n\r\n")[2].decode()


def test_peer_uid_reads_the_clients_socket(served) -> None:
    """The lookup itself: this process's own connection is found as its own user's, a
    connection that does not exist as nobody's."""
    from datahub.api.local_mode import peer_uid

    server, _ = served
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        client = s.getsockname()
        assert peer_uid(client, ("127.0.0.1", server.port)) == os.geteuid()
        # the server's end of it is no client socket of this connection's direction
        assert peer_uid(("127.0.0.1", server.port), ("127.0.0.1", client[1] + 1)) is None
