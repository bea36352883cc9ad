"""sec25: every route of ``datahub serve --auth``, and what each kind of caller gets from it.

``test_review22b_routes.py`` holds every route to the check its kind needs for a caller with no
credential and for a token with no role. This file goes on from there with the whole ladder
of docs/api.md's "Endpoints" table and "Remote store and task routes": for each route of the
app's route table (walked from the app, so a route added later with no row here fails the first
test by name), what an anonymous caller, a reader of *another* dataset, a reader, a writer and
an admin of the route's dataset, and a global admin get:

- a role it lacks on a dataset it cannot read: the 404 of a missing dataset;
- a role it lacks on a dataset it reads: 403 ``access_denied``;
- a route for global admins only: 403 for every other token, the dataset's owner included;
- what it may do: a 2xx for a read, and for a write an answer past the access check (no 401,
  403 or ``dataset_not_found``; the bodies sent are empty or made up, so 4xx of the request
  itself, 409 of a lease, are expected).

The expected table is built from the docs, not from the code: where they disagreed, one of the
two was fixed (see the report of sec25).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.api.tokens import issue_token
from datahub.cli.serve_cmd import build_app
from tests.api.test_review22b_routes import FORMS, LABELX, OPEN, PAGE, STATIC, TOKEN, VALUES, routes
from tests.browser.conftest import fill_pets, make_env

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette prefers httpx2 for its TestClient
    from fastapi.testclient import TestClient

# the callers, least to most: who each is on pets (the dataset every {name} route names)
CALLERS = ("anonymous", "other", "reader", "writer", "owner", "root")
RANK = {"other": 0, "reader": 1, "writer": 2, "owner": 3, "root": 4}
NEEDS = {"reader": 1, "writer": 2, "admin": 3, "global": 4}

# What each route needs, from docs/api.md ("Endpoints"; "Remote store and task routes";
# "Workspace writer leases"). "token": any valid token; "reader"/"writer"/"admin": that role on
# the dataset {name} (or, for a job, on its source and target, docs/api.md); "global": a global
# admin (/metrics: or a principal of api.metrics_principals, none here).
EXPECTED = {
    ("GET", "/metrics"): "global",
    ("GET", "/v1/whoami"): "token",
    ("GET", "/v1/datasets"): "token",
    ("POST", "/v1/datasets"): "token",
    ("GET", "/v1/datasets/{name}"): "reader",
    ("GET", "/v1/datasets/{name}/access"): "reader",
    ("PATCH", "/v1/datasets/{name}"): "admin",
    ("GET", "/v1/datasets/{name}/versions"): "reader",
    ("GET", "/v1/datasets/{name}/versions/{ref}"): "reader",
    ("POST", "/v1/datasets/{name}/versions/{ref}/derive"): "reader",
    ("GET", "/v1/datasets/{name}/versions/{ref}/records"): "reader",
    ("GET", "/v1/datasets/{name}/versions/{ref}/records/{key:path}"): "reader",
    ("GET", "/v1/datasets/{name}/versions/{ref}/export"): "reader",
    ("GET", "/v1/datasets/{name}/diff"): "reader",
    ("POST", "/v1/datasets/{name}/commits"): "writer",
    ("PUT", "/v1/datasets/{name}/tags/{tag}"): "writer",
    ("DELETE", "/v1/datasets/{name}/tags/{tag}"): "writer",
    ("POST", "/v1/remote/datasets"): "token",
    ("GET", "/v1/remote/datasets/{name}/head"): "reader",
    ("GET", "/v1/remote/datasets/{name}/versions"): "reader",
    ("GET", "/v1/remote/datasets/{name}/versions/{seq}"): "reader",
    ("GET", "/v1/remote/datasets/{name}/tags/{tag}"): "reader",
    ("PUT", "/v1/remote/datasets/{name}/tags/{tag}"): "writer",
    ("GET", "/v1/remote/datasets/{name}/records"): "reader",
    ("GET", "/v1/remote/datasets/{name}/directory"): "reader",
    ("POST", "/v1/remote/datasets/{name}/records/get"): "reader",
    ("GET", "/v1/remote/datasets/{name}/diff"): "reader",
    ("POST", "/v1/remote/datasets/{name}/commits"): "writer",
    # a lease bound to pets: taking, renewing and showing it need the writer role on pets
    ("POST", "/v1/remote/leases/{name}"): "writer",
    ("GET", "/v1/remote/leases"): "token",
    # "to a global admin and to a caller who may take the lease ... To any other token ... 404"
    ("GET", "/v1/remote/leases/{name}"): "writer, else 404",
    # sent with the holder's own owner id: a token without the role that learned it is 403, the
    # target not named ("Workspace writer leases": "or a token without the role that learned a
    # holder's id"), whether or not it reads pets
    ("POST", "/v1/remote/leases/{name}/renew"): "writer, else 403",
    ("POST", "/v1/remote/leases/{name}/release"): "token",  # needs the owner id only: 204 either way
    ("POST", "/v1/remote/leases/{name}/break"): "global",
    # job j: source pets, target pets
    ("PUT", "/v1/tasks/jobs/{job}"): "global",
    ("GET", "/v1/tasks/jobs/{job}"): "reader",
    ("DELETE", "/v1/tasks/jobs/{job}"): "global",
    ("POST", "/v1/tasks/jobs/{job}/claim"): "writer",
    ("POST", "/v1/tasks/jobs/{job}/tasks/{index}/renew"): "writer",
    ("POST", "/v1/tasks/jobs/{job}/tasks/{index}/complete"): "writer",
    ("POST", "/v1/tasks/jobs/{job}/tasks/{index}/fail"): "writer",
    ("POST", "/v1/tasks/jobs/{job}/tasks/{index}/release"): "writer",
    ("POST", "/v1/tasks/jobs/{job}/retry-failed"): "global",
    ("GET", "/v1/tasks/jobs/{job}/tasks"): "reader",
    # the dataset browser's pages (docs/browser.md): what the caller may read
    ("GET", "/"): "token",
    ("GET", "/datasets"): "token",  # goes to / (newuser71)
    ("GET", "/datasets/{name}"): "reader",
    ("GET", "/datasets/{name}/versions"): "reader",  # goes to the dataset's page (newuser71)
    ("GET", "/datasets/{name}/versions/{ref}"): "reader",
    ("GET", "/datasets/{name}/versions/{ref}/records/{key:path}"): "reader",
    ("GET", "/datasets/{name}/versions/{seq}/charts/{which}.svg"): "reader",
    ("GET", "/thumbs/{name}/{seq}/{key:path}"): "reader",
    ("GET", "/datasets/{name}/diff"): "reader",
}
# a body each write route is sent: well formed where the route's check comes after the body's
BODIES = {
    "/v1/remote/leases/{name}": {"owner": "o" * 32, "holder": "h", "ttl": 30, "dataset": "pets"},
    "/v1/remote/leases/{name}/renew": {"owner": "a" * 32, "epoch": 1, "ttl": 3600},
    "/v1/remote/leases/{name}/release": {"owner": "o" * 32, "epoch": 1},
    "/v1/remote/leases/{name}/break": {},
    "/v1/tasks/jobs/{job}": {
        "payloads": [{"n": 0}],
        "meta": {"kind": "pack", "source": "pets", "target": "pets"},
    },
    "/v1/tasks/jobs/{job}/claim": {"worker": "w", "lease_seconds": 60},
    "/v1/tasks/jobs/{job}/tasks/{index}/renew": {"lease": "x", "lease_seconds": 60},
    "/v1/tasks/jobs/{job}/tasks/{index}/complete": {"lease": "x", "result": {}},
    "/v1/tasks/jobs/{job}/tasks/{index}/fail": {"lease": "x", "error": "no"},
    "/v1/tasks/jobs/{job}/tasks/{index}/release": {"lease": "x"},
}
LEASE = "ws-pets"  # the workspace whose lease, bound to pets, the lease routes name
QUERY = "?seq=2&a=1&b=2&from=1&to=2"


def fill(method: str, path: str) -> str:
    if path.startswith("/v1/remote/leases/"):
        name = LEASE
    else:
        name = "pets"
    if (method, path) == ("DELETE", "/v1/datasets/{name}/tags/{tag}"):
        path = path.replace("{tag}", "scratch")  # golden stays for the next caller's reads
    job = "gone" if (method, path) == ("DELETE", "/v1/tasks/jobs/{job}") else "j"
    values = {**VALUES, "name": name, "job": job}
    if (method, path) == ("PUT", "/v1/tasks/jobs/{job}"):
        values["job"] = "new"
    return re.sub(r"\{(\w+)(?::path)?\}", lambda m: values[m[1]], path) + QUERY


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[object, TestClient, dict[str, str]]]:
    """``datahub serve --auth``'s app over the browser's pets, owned by alice (the owner), read
    by rita, written by will; olga reads only ``misc``; root is a global admin. Job ``j`` packs
    pets into pets; lease ``ws-pets`` is bound to pets."""
    env = make_env(tmp_path_factory.mktemp("sec25") / "h", local_mode=False)
    fill_pets(env)
    env.catalog.update_dataset("pets", acl={"rita": "reader", "will": "writer"})
    env.catalog.create_dataset("misc", owner="alice", acl={"olga": "reader"})
    store = env.catalog.store
    tokens = {
        "other": issue_token(store, "olga")[0],
        "reader": issue_token(store, "rita")[0],
        "writer": issue_token(store, "will")[0],
        "owner": issue_token(store, "alice")[0],
        "root": issue_token(store, "root", admin=True)[0],
    }
    app, cache = build_app(env.config, env.catalog, env.stores, labelx=True)
    try:
        with TestClient(app, base_url="http://127.0.0.1") as client:
            root = {"Authorization": f"Bearer {tokens['root']}"}
            for job in ("j", "gone"):
                made = client.put(f"/v1/tasks/jobs/{job}", headers=root, json=BODIES["/v1/tasks/jobs/{job}"])
                assert made.status_code == 200, made.text
            taken = client.post(
                f"/v1/remote/leases/{LEASE}",
                headers=root,
                json={"owner": "a" * 32, "holder": "node-a", "ttl": 3600, "dataset": "pets"},
            )
            assert taken.status_code == 200, taken.text
            yield app, client, tokens
    finally:
        cache.close()
        env.stores.close()
        env.catalog.close()


def test_every_route_has_a_row_of_who_may_call_it(served) -> None:
    app, _, _ = served
    found = {(m, p) for m, p in routes(app) if m != "MOUNT"}
    labelx = {(m, p) for m, p in found if p.startswith("/labelx/")}
    mine = found - labelx - OPEN - FORMS
    assert not mine - EXPECTED.keys(), (
        f"routes with no row here (who may call them?): {sorted(mine - EXPECTED.keys())}"
    )
    assert not EXPECTED.keys() - mine, (
        f"rows for routes the app no longer serves: {sorted(EXPECTED.keys() - mine)}"
    )
    assert EXPECTED.keys() == TOKEN | PAGE  # the same routes review22b holds to their first check
    assert labelx <= LABELX | OPEN | FORMS and {p for m, p in routes(app) if m == "MOUNT"} == STATIC


DOC_ROW = re.compile(r"^\| `(GET|POST|PUT|PATCH|DELETE) ([^`?]+)[^`]*` \| ([^|]+) \|")


def test_the_table_agrees_with_docs_api_endpoints() -> None:
    """Each row of docs/api.md's "Endpoints" table with a plain role (reader, writer, admin, any
    token) gives that role to its route here; /metrics' row names global admins. So this
    table is the docs' and a change to either without the other fails."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    plain = {"reader": "reader", "writer": "writer", "admin": "admin", "any token": "token"}
    seen = 0
    for line in doc.splitlines():
        if not (m := DOC_ROW.match(line)):
            continue
        method, path, role = m[1], m[2].replace("…/", "/v1/datasets/{name}/"), m[3].strip()
        path = path.replace("{key}", "{key:path}")
        if path == "/healthz":
            continue
        if path == "/metrics":
            assert role.startswith("with `--auth`: a global admin"), role
            assert EXPECTED[method, path] == "global"
        elif role in plain:
            assert EXPECTED[method, path] == plain[role], (method, path, role)
        else:  # derive: reader here (its target's rules are test_derive_hidden_target.py's)
            assert role.startswith("reader here") and EXPECTED[method, path] == "reader", (method, path, role)
        seen += 1
    assert seen == 17, seen  # every row of the table


def _expected(need: str, caller: str) -> str:
    """``allowed``, ``unauthenticated``, ``hidden`` (a missing dataset's 404) or ``denied`` (403)."""
    if caller == "anonymous":
        return "unauthenticated"
    if need == "token":
        return "allowed"
    if need == "writer, else 404":
        return "allowed" if RANK[caller] >= NEEDS["writer"] else "hidden"
    if need == "writer, else 403":
        return "allowed" if RANK[caller] >= NEEDS["writer"] else "denied"
    if need == "global":
        return "allowed" if caller == "root" else "denied"
    if caller == "other":
        return "hidden"
    return "allowed" if RANK[caller] >= NEEDS[need] else "denied"


def _outcome(method: str, path: str, r) -> str:
    page = path in {p for _, p in PAGE}
    if page and r.status_code == 303 and r.headers["location"].startswith("/login?next="):
        return "unauthenticated"
    if page and r.status_code == 303 and not r.headers["location"].startswith("/login"):
        return "allowed"  # a cut-back address sends its caller on, after its access check
    if r.status_code == 401:
        return "unauthenticated"
    if r.status_code == 403:
        return "denied"
    if r.status_code == 404 and path.startswith("/v1/remote/leases/"):
        return "hidden"  # a lease the caller may not take answers as one never taken
    if r.status_code == 404:
        code = r.json()["error"]["code"] if not page else ("not found" if "not found" in r.text else r.text)
        if code in ("dataset_not_found", "job_not_found") or (page and "pets" in r.text):
            return "hidden"
        if method == "GET" and code != "not_found":
            return f"404 {code}"
    if method == "GET" and not 200 <= r.status_code < 300:
        return f"{r.status_code}"
    return "allowed"


@pytest.mark.parametrize("caller", CALLERS)
def test_each_caller_gets_what_the_docs_say_from_every_route(served, caller: str) -> None:
    _, client, tokens = served
    headers = {"Authorization": f"Bearer {tokens[caller]}"} if caller in tokens else {}
    wrong = []
    # writes last, the global admin's deletes after everything else
    order = sorted(EXPECTED, key=lambda mp: (mp[0] != "GET", mp[0] == "DELETE", mp[1]))
    for method, path in order:
        need = EXPECTED[method, path]
        body = {"json": BODIES.get(path, {})} if method in ("POST", "PUT", "PATCH") else {}
        r = client.request(method, fill(method, path), headers=headers, follow_redirects=False, **body)
        got, want = _outcome(method, path, r), _expected(need, caller)
        if got != want:
            wrong.append((method, path, want, got, r.status_code, r.text[:160]))
    assert not wrong, "\n".join(map(str, wrong))
