"""review22b: every route ``datahub serve`` answers, and who it lets in (promise 5).

The classic hole is a route added later without a check. So this file lists every route of the
app ``datahub serve --auth`` builds (the API, the remote store and task queue, the dataset
browser, LabelX under ``/labelx``), walked from the app itself, and holds each to the check its
kind needs:

- ``OPEN``: answers anyone (liveness, the API's own documents, the sign-in forms, static
  files); a form that changes a session still needs its CSRF token (403 without);
- ``TOKEN``: the JSON API and ``/metrics``: 401 ``unauthenticated`` without a bearer token;
- ``PAGE``: a browser page: a redirect to ``/login`` without a session;
- ``LABELX``: LabelX's API and pages: 401 (or the login form for a page) without its session.

A route in none of these tables fails the first test by name: whoever adds one decides here
what it needs. Then no credential at all, and a token with no role on ``pets``, are sent to
every route: the second must find ``pets`` exactly as missing as a dataset that does not exist.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator

import pytest
from fastapi.routing import APIRoute
from starlette.routing import Mount

from datahub.api.tokens import issue_token
from datahub.cli.serve_cmd import build_app
from tests.browser.conftest import fill_pets, make_env

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette prefers httpx2 for its TestClient
    from fastapi.testclient import TestClient

OPEN = {
    ("GET", "/openapi.json"),
    ("GET", "/docs"),
    ("GET", "/docs/assets/{name}"),
    ("GET", "/healthz"),
    ("GET", "/favicon.ico"),
    ("GET", "/login"),
    ("GET", "/labelx/api/openapi.json"),
    ("GET", "/labelx/api/docs"),
    ("GET", "/labelx/api/docs/assets/{name}"),
    ("GET", "/labelx/login"),
}
# forms that change a session: open, but refused (403, or back to the form) without their CSRF token
FORMS = {("POST", "/login"), ("POST", "/logout"), ("POST", "/labelx/login")}
PAGE = {
    ("GET", "/"),
    ("GET", "/datasets/{name}"),
    ("GET", "/datasets/{name}/versions/{ref}"),
    ("GET", "/datasets/{name}/versions/{ref}/records/{key:path}"),
    ("GET", "/datasets/{name}/versions/{seq}/charts/{which}.svg"),
    ("GET", "/thumbs/{name}/{seq}/{key:path}"),
    ("GET", "/datasets/{name}/diff"),
    ("GET", "/datasets"),  # an address cut back: to / (newuser71)
    ("GET", "/datasets/{name}/versions"),  # an address cut back: to the dataset's page (newuser71)
}
TOKEN = {
    ("GET", "/metrics"),  # under --auth, unless api.metrics_public (sec24)
    ("GET", "/v1/whoami"),
    ("GET", "/v1/datasets"),
    ("POST", "/v1/datasets"),
    ("GET", "/v1/datasets/{name}"),
    ("GET", "/v1/datasets/{name}/access"),
    ("PATCH", "/v1/datasets/{name}"),
    ("GET", "/v1/datasets/{name}/versions"),
    ("GET", "/v1/datasets/{name}/versions/{ref}"),
    ("POST", "/v1/datasets/{name}/versions/{ref}/derive"),
    ("GET", "/v1/datasets/{name}/versions/{ref}/records"),
    ("GET", "/v1/datasets/{name}/versions/{ref}/records/{key:path}"),
    ("GET", "/v1/datasets/{name}/versions/{ref}/export"),
    ("GET", "/v1/datasets/{name}/diff"),
    ("POST", "/v1/datasets/{name}/commits"),
    ("PUT", "/v1/datasets/{name}/tags/{tag}"),
    ("DELETE", "/v1/datasets/{name}/tags/{tag}"),
    ("POST", "/v1/remote/datasets"),
    ("GET", "/v1/remote/datasets/{name}/head"),
    ("GET", "/v1/remote/datasets/{name}/versions"),
    ("GET", "/v1/remote/datasets/{name}/versions/{seq}"),
    ("GET", "/v1/remote/datasets/{name}/tags/{tag}"),
    ("PUT", "/v1/remote/datasets/{name}/tags/{tag}"),
    ("GET", "/v1/remote/datasets/{name}/records"),
    ("GET", "/v1/remote/datasets/{name}/directory"),
    ("POST", "/v1/remote/datasets/{name}/records/get"),
    ("GET", "/v1/remote/datasets/{name}/diff"),
    ("POST", "/v1/remote/datasets/{name}/commits"),
    ("POST", "/v1/remote/leases/{name}"),
    ("GET", "/v1/remote/leases"),
    ("GET", "/v1/remote/leases/{name}"),
    ("POST", "/v1/remote/leases/{name}/renew"),
    ("POST", "/v1/remote/leases/{name}/release"),
    ("POST", "/v1/remote/leases/{name}/break"),
    ("PUT", "/v1/tasks/jobs/{job}"),
    ("GET", "/v1/tasks/jobs/{job}"),
    ("DELETE", "/v1/tasks/jobs/{job}"),
    ("POST", "/v1/tasks/jobs/{job}/claim"),
    ("POST", "/v1/tasks/jobs/{job}/tasks/{index}/renew"),
    ("POST", "/v1/tasks/jobs/{job}/tasks/{index}/complete"),
    ("POST", "/v1/tasks/jobs/{job}/tasks/{index}/fail"),
    ("POST", "/v1/tasks/jobs/{job}/tasks/{index}/release"),
    ("POST", "/v1/tasks/jobs/{job}/retry-failed"),
    ("GET", "/v1/tasks/jobs/{job}/tasks"),
}
LABELX = {
    ("POST", "/labelx/logout"),
    ("GET", "/labelx/"),
    ("GET", "/labelx/projects/{project_id}"),
    ("GET", "/labelx/projects/{project_id}/review"),
    ("GET", "/labelx/tasks/{task_id}"),
    ("GET", "/labelx/admin"),
    ("GET", "/labelx/api/me"),
    ("GET", "/labelx/api/users"),
    ("POST", "/labelx/api/users"),
    ("GET", "/labelx/api/tokens"),
    ("POST", "/labelx/api/tokens"),
    ("POST", "/labelx/api/tokens/revoke"),
    ("GET", "/labelx/api/projects"),
    ("POST", "/labelx/api/projects"),
    ("GET", "/labelx/api/projects/{project_id}"),
    ("GET", "/labelx/api/projects/{project_id}/tasks"),
    ("POST", "/labelx/api/projects/{project_id}/take-task"),
    ("GET", "/labelx/api/projects/{project_id}/stats"),
    ("GET", "/labelx/api/projects/{project_id}/review"),
    ("POST", "/labelx/api/projects/{project_id}/commit"),
    ("POST", "/labelx/api/projects/{project_id}/suggestions"),
    ("GET", "/labelx/api/projects/{project_id}/export/{fmt}"),
    ("PUT", "/labelx/api/tasks/{task_id}/assignee"),
    ("GET", "/labelx/api/tasks/{task_id}"),
    ("POST", "/labelx/api/tasks/{task_id}/submit"),
    ("POST", "/labelx/api/items/{item_id}/claim"),
    ("POST", "/labelx/api/items/{item_id}/release"),
    ("PUT", "/labelx/api/items/{item_id}"),
    ("POST", "/labelx/api/items/{item_id}/review"),
    ("GET", "/labelx/api/items/{item_id}/image"),
}
STATIC = {"/static", "/labelx/static"}  # StaticFiles of the package's own directories
# what a route's path parameters are sent as: a version, record and tag of pets that exist
VALUES = {
    "ref": "2",
    "seq": "2",
    "key": "train/cat/001.jpg",
    "tag": "golden",
    "which": "labels",
    "job": "j",
    "index": "0",
    "project_id": "1",
    "task_id": "1",
    "item_id": "1",
    "fmt": "csv",
}
QUERY = "?seq=2&a=1&b=2&from=1&to=2"


def routes(app, prefix: str = "") -> Iterator[tuple[str, str]]:
    """(method, path) of every route ``app`` serves, into included routers and mounted apps;
    a mount with no routes of its own (static files) as ("MOUNT", path)."""
    for route in app.routes:
        if isinstance(route, Mount):
            inner = getattr(route.app, "routes", None)
            if inner is None:
                yield "MOUNT", prefix + route.path
            else:
                yield from routes(route.app, prefix + route.path)
        elif hasattr(route, "original_router"):  # FastAPI's included router
            yield from routes(route.original_router, prefix + (route.include_context.prefix or ""))
        elif isinstance(route, APIRoute) or hasattr(route, "methods"):
            for method in sorted((route.methods or set()) - {"HEAD"}):
                yield method, prefix + route.path


def url(path: str, name: str = "pets") -> str:
    filled = re.sub(r"\{(\w+)(?::path)?\}", lambda m: name if m[1] == "name" else VALUES[m[1]], path)
    return filled + QUERY


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    """``datahub serve --auth``'s app over the browser's pets (owned by alice), and eve's token,
    which holds no role anywhere."""
    env = make_env(tmp_path_factory.mktemp("review22b") / "h", local_mode=False)
    fill_pets(env)
    eve = issue_token(env.catalog.store, "eve")[0]
    alice = issue_token(env.catalog.store, "alice")[0]
    app, cache = build_app(env.config, env.catalog, env.stores, labelx=True)
    try:
        with TestClient(app, base_url="http://127.0.0.1") as client:
            yield app, client, {"eve": eve, "alice": alice}
    finally:
        cache.close()
        env.stores.close()
        env.catalog.close()


def test_every_route_is_in_a_table_of_what_it_needs(served) -> None:
    app, _, _ = served
    found = set(routes(app))
    mounts = {path for method, path in found if method == "MOUNT"}
    found -= {("MOUNT", path) for path in mounts}
    known = OPEN | FORMS | PAGE | TOKEN | LABELX
    assert mounts == STATIC, "a mounted app this file does not know: say what it needs"
    assert not found - known, f"routes with no entry here (what check do they need?): {sorted(found - known)}"
    assert not known - found, f"routes listed here that the app no longer serves: {sorted(known - found)}"


def test_no_credential_gets_only_the_open_routes(served) -> None:
    """Each route that needs a caller refuses one with no credential, before it reads or does
    anything: the API with 401 ``unauthenticated``, a page with the way to ``/login``."""
    _, client, _ = served
    for method, path in sorted(TOKEN | PAGE | LABELX):
        r = client.request(method, url(path), json={}, follow_redirects=False)
        if (method, path) in TOKEN:
            assert r.status_code == 401, (method, path, r.status_code, r.text[:200])
            assert r.json()["error"]["code"] == "unauthenticated", (method, path)
            assert r.headers["www-authenticate"] == "Bearer", (method, path)
        elif (method, path) in PAGE:
            assert r.status_code == 303, (method, path, r.status_code)
            assert r.headers["location"].startswith("/login?next="), (method, path)
        else:
            assert r.status_code == 401, (method, path, r.status_code, r.text[:200])
            assert r.json()["error"]["code"] == "unauthenticated", (method, path)
    for method, path in sorted(FORMS):
        r = client.request(method, path, data={"token": "x", "csrf": "x", "name": "x", "password": "x"})
        # no CSRF cookie: refused (the browser's forms: 403; LabelX's: back to its form, saying so)
        assert r.status_code == 403 or "error=expired" in str(r.url), (method, path, r.status_code)


def test_a_token_with_no_role_finds_the_dataset_as_missing_on_every_route_naming_one(served) -> None:
    """eve (no role on pets) gets from every route naming ``pets`` exactly what the route
    answers for ``pexs``, which does not exist (status and body, the name aside), whatever
    the method: a write route must not tell her more than a read one. The premise is checked
    as well: alice, its owner, is served by each read route."""
    _, client, tokens = served
    named = sorted((m, p) for m, p in TOKEN | PAGE if "{name}" in p and "/leases/" not in p)
    assert len(named) == 30, named
    for method, path in named:
        bodies = {"json": {}} if method in ("POST", "PUT", "PATCH") else {}
        if method == "GET":
            mine = client.get(url(path), headers={"Authorization": f"Bearer {tokens['alice']}"})
            assert mine.status_code == 200, (path, mine.status_code, mine.text[:200])
        eve = {"Authorization": f"Bearer {tokens['eve']}"}
        hidden = client.request(method, url(path), headers=eve, follow_redirects=False, **bodies)
        missing = client.request(method, url(path, "pexs"), headers=eve, follow_redirects=False, **bodies)
        assert hidden.status_code == missing.status_code == 404, (method, path, hidden.text[:200])
        assert hidden.content.replace(b"pets", b"pexs") == missing.content, (method, path)


def test_the_static_mounts_serve_only_their_own_directories(served) -> None:
    """``..`` in any spelling never leaves a static directory (nor the API docs' assets)."""
    _, client, _ = served
    for path in (
        "/static/..%2f..%2f__init__.py",
        "/static/%2e%2e/%2e%2e/__init__.py",
        "/labelx/static/..%2f..%2fauth.py",
        "/labelx/static/%2e%2e/auth.py",
        "/docs/assets/..%2fapidocs.py",
    ):
        r = client.get(path)
        assert r.status_code == 404, (path, r.status_code)
        assert b"import" not in r.content, path
