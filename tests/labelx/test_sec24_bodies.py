"""sec24: LabelX served alone bounds request bodies with the API's own limits (BodyLimits).

``datahub labelx serve`` refused only a declared ``Content-Length`` over ``api.max_body_bytes``:
a chunked body was read whole before it was measured (``/api/``), or not measured at all (the
sign-in form, a page's POST), and a body trickled in held its connection for ever. It now
runs the API's middleware (413 as the body arrives, 408 past ``api.body_read_timeout``, the
unproven callers' budget), and LabelX keeps no size check of its own."""

from __future__ import annotations

import signal
import socket
from pathlib import Path

import httpx
import pytest

from labelx.app import create_labelx_app
from tests.cli.test_demo import start, stop
from tests.labelx.conftest import Env, Session, add_users
from tests.labelx.test_serve_signals import wait_answering
from tests.servers import free_port

LIMIT = 4096


def _chunks(n: int):
    yield b"name=admin&password="
    for _ in range(n // 1024 + 1):
        yield b"x" * 1024


def _refused(resp: httpx.Response, method: str, path: str) -> None:
    assert resp.status_code == 413, (path, resp.status_code, resp.text[:300])
    error = resp.json()["error"]
    assert error["code"] == "payload_too_large" and error["details"]["max_body_bytes"] == LIMIT
    assert (
        f"request body of {method} {path} larger than {LIMIT} bytes (api.max_body_bytes)" in error["message"]
    )
    assert "commits" not in error["message"]  # a commit's advice is the API's, not LabelX's


@pytest.fixture
def small(env: Env):
    env.config.api.max_body_bytes = LIMIT
    app = create_labelx_app(env.config, catalog=env.catalog, stores=env.stores, cache=env.cache)
    add_users(app, admin="admin")
    yield app
    app.state.labelx.store.close()


def test_a_chunked_body_over_the_limit_is_refused_on_every_path_before_any_route(small) -> None:
    admin = Session(small, "admin")
    form = {"content-type": "application/x-www-form-urlencoded"}
    # the sign-in form: no size check reached it (it answered as a login attempt)
    resp = admin.client.post("/login", content=_chunks(2 * LIMIT), headers=form, follow_redirects=False)
    _refused(resp, "POST", "/login")
    assert "set-cookie" not in resp.headers
    resp = admin.send(
        "POST", "/api/tokens", content=_chunks(2 * LIMIT), headers={"content-type": "application/json"}
    )
    _refused(resp, "POST", "/api/tokens")
    # a declared length over the limit, too; a body within it is served as before
    big = admin.post("/api/projects", {"name": "x" * (2 * LIMIT)})
    _refused(big, "POST", "/api/projects")
    assert big.headers["content-security-policy"]  # the refusal carries LabelX's headers
    assert admin.get("/api/projects").json() == []
    resp = admin.send("POST", "/api/projects/1/suggestions", content=b"{}\n" * LIMIT)
    _refused(resp, "POST", "/api/projects/1/suggestions")
    assert "suggestions file: split it" in resp.json()["error"]["message"]


def test_labelx_serve_alone_refuses_an_oversized_body_and_a_trickled_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a real process: 413 for a chunked body over the limit, 408 (connection closed) for a
    body that stops arriving, where it waited for the rest for ever."""
    monkeypatch.setenv("DATAHUB_API_MAX_BODY_BYTES", str(LIMIT))
    monkeypatch.setenv("DATAHUB_API_BODY_READ_TIMEOUT", "1")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    home = tmp_path / "var"
    proc = start(
        ["-m", "datahub.cli.main", "--home", str(home), "labelx", "serve", "--port", str(port)], tmp_path
    )
    try:
        wait_answering(proc, url)
        form = {"content-type": "application/x-www-form-urlencoded"}
        resp = httpx.post(f"{url}/login", content=_chunks(4 * LIMIT), headers=form, timeout=60)
        _refused(resp, "POST", "/login")
        with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:  # a hang guard only
            sock.sendall(
                b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                b"Content-Length: 100\r\n\r\nname=admin"
            )
            answer = b""
            while chunk := sock.recv(65536):  # the server closes it after its answer
                answer += chunk
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408"), answer[:300]
        assert b"connection: close" in head.lower() and b"api.body_read_timeout" in body
    finally:
        _, err = stop(proc, signal.SIGTERM)
    assert proc.returncode == 0 and "Traceback" not in err, err
