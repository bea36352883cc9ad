"""caller43: every route of ``datahub serve --auth``, and a credential that ends while it is used.

The audit of who may call which route, router by router (the API, the remote store, the task
queue, ``/metrics``, the OpenAPI documents, the dataset browser's pages, LabelX): one table,
``SCOPES``, walked against the app's own route table, so a route added later with no row here
fails ``test_every_route_has_a_row`` by name. Each row says what the route needs (docs/api.md's
"Endpoints" and "Remote store and task routes", held to the docs by ``test_sec25_role_matrix``,
whose ladder of roles this table reuses) and how the route may be long-lived: it takes a body
(``body``) or streams its answer (``stream``).

What the audit found and this file holds (each failed before caller43):

- a token revoked while its request's body was arriving still committed (or tagged, or took a
  lease): ``early_auth`` authenticated it when the headers came, and the route used that
  caller after the body (up to ``api.body_read_timeout`` later) without asking again;
- an NDJSON export, an NDJSON diff, the remote store's listings (records, directory, diff)
  and a task job's listing streamed to their end for a token revoked, or a reader removed from the access list, after
  the stream began (minutes for a large version). They now check before each chunk: the public
  streams end with an ``{"error": ...}`` line, the remote listings stop without their
  ``{"end": n}`` line, so the client's resume gets the refusal itself.

What it checked and found right: a revoked token (API, LabelX ``lx_``) is refused on every
route it could call, and a browser session of a revoked token on every page; the documents and
``/healthz`` are the only routes open to anyone; tokens do not expire (docs/api.md says so) and
no API route issues one, so no token can mint a stronger one (LabelX's ``POST /api/tokens``
mints for the caller's own account only: tests/labelx/test_caller37_tokens.py).

Driven over HTTP against a real server on loopback (uvicorn in a thread), with raw sockets
where the order of events matters: a body is sent only after the server answered
``100 Continue`` (so the token was checked), and a stream is read through a small receive
buffer, so the server cannot have sent it all before the token is revoked.
"""

from __future__ import annotations

import json
import re
import socket

import httpx
import pytest
from fastapi.responses import StreamingResponse
from fastapi.routing import APIRoute
from starlette.routing import Mount

from datahub.api.server import ApiServer
from datahub.api.tokens import issue_token, revoke_token
from datahub.browser import session as browser_session
from datahub.catalog.model import Put, Record
from datahub.cli.serve_cmd import build_app
from labelx.auth import sha256
from tests.api.test_review22b_routes import FORMS, LABELX, OPEN, STATIC, routes
from tests.api.test_sec25_role_matrix import BODIES, EXPECTED, LEASE, fill
from tests.browser.conftest import fill_pets, make_env

GUARD = 60.0  # seconds: a hang guard only, never a timing assertion
BIG = 10000  # records of dataset "big": ~20 MB exported, ~8 MB as a directory listing

# Every route, and what it needs: EXPECTED's rung of sec25's ladder for the API, the pages and
# /metrics; "open" for anyone; "form" for a sign-in form (its CSRF token); "labelx" for
# LabelX's session or lx_ token. Then how long it may hold a credential: "body" (a request body
# the server reads before the route runs), "stream" (an answer streamed chunk by chunk, checked
# again before each chunk), "stream, one chunk" (a listing bounded by what it lists, a dataset's
# versions: sent in one go, checked once).
SCOPES: dict[tuple[str, str], tuple[str, str]] = {
    **{route: ("open", "") for route in OPEN},
    **{route: ("form", "body") for route in FORMS},
    **{route: ("labelx", "body" if route[0] in ("POST", "PUT", "PATCH") else "") for route in LABELX},
    **{
        route: (need, "body" if route[0] in ("POST", "PUT", "PATCH") else "")
        for route, need in EXPECTED.items()
    },
}
STREAMS = {
    ("GET", "/v1/datasets/{name}/versions/{ref}/export"): "stream",
    ("GET", "/v1/datasets/{name}/diff"): "stream",
    ("GET", "/v1/remote/datasets/{name}/records"): "stream",
    ("GET", "/v1/remote/datasets/{name}/directory"): "stream",
    ("GET", "/v1/remote/datasets/{name}/diff"): "stream",
    ("GET", "/v1/remote/datasets/{name}/versions"): "stream, one chunk",
    ("GET", "/v1/tasks/jobs/{job}/tasks"): "stream",
}
for _route, _kind in STREAMS.items():
    SCOPES[_route] = (SCOPES[_route][0], _kind)


def _streams(app) -> set[tuple[str, str]]:
    """Routes whose answer may be a StreamingResponse: by their response class or an NDJSON 200."""
    found = set()

    def walk(router, prefix: str) -> None:
        for route in router.routes:
            inner = getattr(route, "original_router", None)
            if inner is not None:
                walk(inner, prefix + (route.include_context.prefix or ""))
            elif isinstance(route, Mount) and hasattr(route.app, "routes"):
                walk(route.app, prefix + route.path)
            elif isinstance(route, APIRoute):
                ndjson = "application/x-ndjson" in str(route.responses.get(200, {}).get("content", {}))
                streaming = isinstance(route.response_class, type) and issubclass(
                    route.response_class, StreamingResponse
                )
                if ndjson or streaming:
                    for method in route.methods - {"HEAD"}:
                        found.add((method, prefix + route.path))

    walk(app, "")
    return found


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    """sec25's world (pets owned by alice, read by rita, written by will; job j; lease ws-pets)
    served by a real server, plus ``big`` (alice's, read by rita) and a LabelX admin."""
    env = make_env(tmp_path_factory.mktemp("caller43") / "h", local_mode=False)
    fill_pets(env)
    catalog = env.catalog
    catalog.update_dataset("pets", acl={"rita": "reader", "will": "writer"})
    catalog.create_dataset("big", owner="alice", acl={"rita": "reader"})
    catalog.commit(
        "big",
        (
            Put(
                Record(
                    f"d/{'k' * 240}{i:05d}",
                    f"file:///data/{'u' * 480}{i}",
                    f"e{i}",
                    1,
                    "",
                    {"m": "x" * 900},
                    {},
                )
            )
            for i in range(BIG)
        ),
        message="big",
        author="alice",
    )
    root = issue_token(catalog.store, "root", admin=True)[0]
    app, cache = build_app(env.config, env.catalog, env.stores, labelx=True)
    app.state.services.tasks.create_job(  # ~10 MB of task lines, packing big into big
        "bigjob",
        [{"n": n, "pad": "p" * 2000} for n in range(5000)],
        {"kind": "pack", "source": "big", "target": "big"},
    )
    env.config.api.port = 0
    try:
        with ApiServer(app, env.config) as server, httpx.Client(base_url=server.url, timeout=GUARD) as client:
            auth = {"Authorization": f"Bearer {root}"}
            for job in ("j", "gone"):
                made = client.put(f"/v1/tasks/jobs/{job}", headers=auth, json=BODIES["/v1/tasks/jobs/{job}"])
                assert made.status_code == 200, made.text
            taken = client.post(
                f"/v1/remote/leases/{LEASE}",
                headers=auth,
                json={"owner": "a" * 32, "holder": "node-a", "ttl": 3600, "dataset": "pets"},
            )
            assert taken.status_code == 200, taken.text
            yield app, server, client, env
    finally:
        cache.close()
        env.stores.close()
        env.catalog.close()


def _labelx(app):
    return next(r.app for r in app.routes if getattr(r, "path", "") == "/labelx").state.labelx


def test_every_route_has_a_row(served) -> None:
    """A route the app serves with no row here (what does it need? does it stream?) fails by
    name; so does a row for a route gone, and a streaming route this table does not know."""
    app, _, _, _ = served
    found = {(m, p) for m, p in routes(app) if m != "MOUNT"}
    assert not found - SCOPES.keys(), (
        f"routes with no row (who may call them?): {sorted(found - SCOPES.keys())}"
    )
    assert not SCOPES.keys() - found, f"rows for routes gone: {sorted(SCOPES.keys() - found)}"
    assert {p for m, p in routes(app) if m == "MOUNT"} == STATIC
    streaming = _streams(app)
    assert streaming == {r for r, (_, how) in SCOPES.items() if how.startswith("stream")}, sorted(streaming)


def _revoked_root(env) -> str:
    token = issue_token(env.catalog.store, "root", admin=True)[0]
    revoke_token(env.catalog.store, token)
    return token


def test_a_revoked_token_is_refused_on_every_route(served) -> None:
    """A global admin's token, once revoked, opens nothing: every API route, page and
    /metrics answers it as no credential (401, or a page's way to /login); a browser session
    signed in with it ends; a revoked LabelX token is refused by every LabelX route."""
    app, _, client, env = served
    token = issue_token(env.catalog.store, "root", admin=True)[0]
    session_id = browser_session.sign_in(app.state.services, token)
    held = browser_session.session_cookie(app.state.services)  # the name the session is read from
    revoke_token(env.catalog.store, token)
    lx = _labelx(app)
    admin = lx.store.create_user("lxroot", "admin", "x")
    lx_token = lx.auth.new_token(admin, "audit")
    lx.store.delete_token(sha256(lx_token))
    wrong = []
    for (method, path), (need, _) in sorted(SCOPES.items()):
        if need in ("open", "form"):
            continue
        body = {"json": BODIES.get(path, {})} if method in ("POST", "PUT", "PATCH") else {}
        target = (
            fill(method, path)
            if need != "labelx"
            else re.sub(r"\{\w+\}", "1", path).replace("/1/export/1", "/1/export/csv")
        )
        bearer = lx_token if need == "labelx" else token
        r = client.request(method, target, headers={"Authorization": f"Bearer {bearer}"}, **body)
        page = need != "labelx" and not path.startswith(("/v1/", "/metrics"))
        if page:  # a page answers a bearer it refuses with its error page, 401
            refused = r.status_code == 401 and "revoked" in r.text
        else:
            refused = r.status_code == 401 and r.json()["error"]["code"] == "unauthenticated"
        if not refused:
            wrong.append((method, path, "bearer", r.status_code, r.text[:120]))
        if page:  # and a browser session of that token
            r = client.request(method, target, headers={"Cookie": f"{held}={session_id}"})
            if not (r.status_code == 303 and r.headers["location"].startswith("/login")):
                wrong.append((method, path, "session", r.status_code, r.text[:120]))
    assert not wrong, "\n".join(map(str, wrong))


def _request_head(method: str, target: str, token: str, length: int, extra: str = "") -> bytes:
    return (
        f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\nConnection: close\r\n{extra}\r\n"
    ).encode()


def _read_until(conn: socket.socket, marker: bytes, got: bytes = b"") -> bytes:
    while marker not in got:
        chunk = conn.recv(65536)
        assert chunk, f"the server closed before sending {marker!r}: {got[:300]!r}"
        got += chunk
    return got


def _until_closed(conn: socket.socket, got: bytes = b"") -> bytes:
    while chunk := conn.recv(65536):
        got += chunk
    return got


BODY_ROUTES = sorted(r for r, (need, how) in SCOPES.items() if how == "body" and r[1].startswith("/v1/"))


@pytest.mark.parametrize(("method", "path"), BODY_ROUTES, ids=[f"{m} {p}" for m, p in BODY_ROUTES])
def test_a_token_revoked_while_its_body_arrives_writes_nothing(served, method: str, path: str) -> None:
    """The server checked the token when the headers came (it answered ``100 Continue``); the
    token is revoked; then the body comes. The route must refuse it (401), not act on it."""
    _, server, _, env = served
    token = issue_token(env.catalog.store, "root", admin=True)[0]
    if path == "/v1/datasets/{name}/commits":
        body = {"base": None, "message": "late", "changes": []}
    elif path == "/v1/remote/datasets/{name}/commits":
        body = None
    else:
        body = BODIES.get(path, {})
    raw = (
        b'{"base": 0, "message": "late", "commit_id": "c43-late-commit-0000000000000000"}\n'
        if body is None
        else json.dumps(body).encode()
    )
    with socket.create_connection(("127.0.0.1", server.port), timeout=GUARD) as conn:
        conn.sendall(_request_head(method, fill(method, path), token, len(raw), "Expect: 100-continue\r\n"))
        got = _read_until(conn, b"\r\n\r\n")
        assert got.startswith(b"HTTP/1.1 100"), got[:300]  # the token passed the check on arrival
        revoke_token(env.catalog.store, token)
        conn.sendall(raw)
        answer = _until_closed(conn, got.split(b"\r\n\r\n", 1)[1])
    status = answer.split(b"\r\n", 1)[0]
    assert status.startswith(b"HTTP/1.1 401"), (method, path, answer[:400])
    assert b'"unauthenticated"' in answer


def _dechunk(data: bytes) -> bytes:
    out, rest = b"", data
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out, rest = out + rest[:size], rest[size + 2 :]
    return out


def _stream_then_lose_access(server, env, target: str, token: str, lose) -> tuple[bytes, bytes]:
    """GET ``target`` through a 16 KiB receive buffer, read the first MiB, call ``lose()``,
    read the rest; returns (the status line, the de-chunked body)."""
    conn = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)  # no autotuning: the server waits
    conn.settimeout(GUARD)
    with conn:
        conn.connect(("127.0.0.1", server.port))
        conn.sendall(
            f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        got = _read_until(conn, b"\r\n\r\n")
        while len(got) < 1024 * 1024:
            chunk = conn.recv(65536)
            assert chunk, "the stream ended before a MiB came"
            got += chunk
        lose()
        got = _until_closed(conn, got)
    head, _, body = got.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head.lower(), head
    return head.split(b"\r\n", 1)[0], _dechunk(body)


STREAMED = {
    "export": "/v1/datasets/big/versions/1/export",
    "diff": "/v1/datasets/big/diff?from=0&to=1&format=ndjson",
    "remote records": "/v1/remote/datasets/big/records?seq=1",
    "remote directory": "/v1/remote/datasets/big/directory?seq=1&prefix=d/",
    "remote diff": "/v1/remote/datasets/big/diff?a=0&b=1",
    "tasks": "/v1/tasks/jobs/bigjob/tasks",
}


@pytest.mark.parametrize("how", ["revoked", "role removed"])
@pytest.mark.parametrize("which", sorted(STREAMED))
def test_a_stream_stops_when_its_caller_loses_access(served, which: str, how: str) -> None:
    """rita reads ``big``; after the first MiB of a stream, her token is revoked (or her role
    removed). The rest never comes: a public stream ends with one error line (401
    ``unauthenticated``, or the 404 of a missing dataset), a remote listing stops without its
    ``{"end": n}`` line (its client resumes and gets that error as an answer)."""
    _, server, _, env = served
    catalog = env.catalog
    token = issue_token(catalog.store, "rita")[0]
    catalog.update_dataset("big", acl={"rita": "reader"})

    def lose() -> None:
        if how == "revoked":
            revoke_token(catalog.store, token)
        else:
            catalog.update_dataset("big", acl={})

    try:
        status, body = _stream_then_lose_access(server, env, STREAMED[which], token, lose)
    finally:
        catalog.update_dataset("big", acl={"rita": "reader"})
    assert status.startswith(b"HTTP/1.1 200"), status
    lines = body.decode().splitlines()
    rows = [line for line in lines if '"error"' not in line and not line.startswith('{"end"')]
    assert len(rows) < (5000 if which == "tasks" else BIG), (
        f"{which}: all {len(rows)} rows came after the caller lost access"
    )
    if which.startswith("remote") or which == "tasks":
        assert not lines[-1].startswith('{"end"'), lines[-1][:200]
    else:
        error = json.loads(lines[-1])["error"]
        code = "unauthenticated" if how == "revoked" else "dataset_not_found"
        assert error["code"] == code, error
