"""sec25: every route of ``datahub labelx serve``, and what each kind of caller gets from it.

The expected answers are docs/labelx.md's table "Who may call each route", read from the
document itself, so the docs and the code cannot drift apart: a route of the app's route table
(walked from the app) with no row there fails, and so does a row the app no longer serves.
Callers, least to most: no credential; carol, an annotator of another project; bob, an
annotator of the project whose task is alice's; alice, the task's annotator; rita, a reviewer;
the admin. Each sends a LabelX API token (bearer: no CSRF involved; CSRF is
``test_auth.py``'s), so one request per route and caller shows what the role alone gets.
"""

from __future__ import annotations

import re
from pathlib import Path

from fastapi.testclient import TestClient

from tests.api.test_review22b_routes import routes
from tests.labelx.conftest import SCHEMA, Session, add_users, make_project, ok

DOC = Path(__file__).resolve().parents[2] / "docs" / "labelx.md"
CALLERS = ("anonymous", "carol", "bob", "alice", "rita", "admin")
# the routes every caller may reach (forms refused without their CSRF token: review22b)
OPEN = {
    ("GET", "/login"),
    ("POST", "/login"),
    ("POST", "/logout"),
    ("GET", "/api/openapi.json"),
    ("GET", "/api/docs"),
    ("GET", "/api/docs/assets/{name}"),
}
ROW = re.compile(r"^\s*\| (GET|POST|PUT|PATCH|DELETE) (/\S*) \|((?: [^|]+ \|){6})\s*$")
BODIES = {
    ("POST", "/api/users"): {"name": "zed", "role": "annotator", "password": "a long enough password"},
    ("POST", "/api/tokens"): {},
    ("POST", "/api/tokens/revoke"): {"token": "lx_not-a-token"},
    ("POST", "/api/projects"): {
        "name": "by-matrix",
        "dataset": "pets",
        "schema": SCHEMA,
        "annotators": ["bob"],
    },
    ("POST", "/api/projects/{project_id}/commit"): {},
    ("PUT", "/api/tasks/{task_id}/assignee"): {"assignee": "alice"},  # as it is: nothing moves
    ("PUT", "/api/items/{item_id}"): {"version": 999, "value": "cat"},  # stale: 409, nothing saved
    ("POST", "/api/items/{item_id}/review"): {"version": 999, "accept": True},
}


def documented() -> dict[tuple[str, str], dict[str, str]]:
    rows = {}
    for line in DOC.read_text().splitlines():
        if m := ROW.match(line):
            cells = [c.strip() for c in m[3].strip(" |").split("|")]
            rows[m[1], m[2]] = dict(zip(CALLERS, cells, strict=True))
    return rows


def outcome(method: str, path: str, r) -> str:
    if r.status_code == 401 or (r.status_code == 303 and "/login" in r.headers.get("location", "")):
        return "401"
    if r.status_code == 403:
        return "403"
    if r.status_code == 404 and re.search(r"no (project|task|item) with id", r.text):
        return "404"  # a project the caller is not in (its tasks, its items) answers as a missing one
    if method == "GET" and r.status_code != 200:
        return f"{r.status_code} {r.text[:120]}"
    return "yes"  # past the check: the answer to what was asked (409 stale, 404 no task left ...)


def test_every_labelx_route_answers_each_caller_as_the_docs_table_says(app, env) -> None:
    table = documented()
    assert len(table) >= 20, "docs/labelx.md's table 'Who may call each route' was not found"
    served = {(m, p) for m, p in routes(app) if m != "MOUNT"}
    assert not served - OPEN - table.keys(), (
        f"routes with no row in docs/labelx.md: {sorted(served - OPEN - table.keys())}"
    )
    assert not table.keys() - served, (
        f"rows for routes LabelX does not serve: {sorted(table.keys() - served)}"
    )

    add_users(app, carol="annotator")
    admin = Session(app, "admin")
    project = make_project(admin)  # alice's task, then bob's
    make_project(admin, "elsewhere", annotators=["carol"])
    task = ok(admin.get(f"/api/projects/{project['id']}/tasks"))[0]
    assert task["assignee"] == "alice", task
    item = ok(admin.get(f"/api/tasks/{task['id']}"))["items"][0]["id"]
    values = {"project_id": project["id"], "task_id": task["id"], "item_id": item, "fmt": "csv"}

    lx = app.state.labelx
    tokens = {who: lx.auth.new_token(lx.store.user_by_name(who)) for who in CALLERS[1:]}
    client = TestClient(app, base_url="http://127.0.0.1")
    wrong = []
    # reads first, then writes; the admin last (its writes succeed)
    order = sorted(table, key=lambda mp: (mp[0] != "GET", mp[1]))
    for caller in CALLERS:
        headers = {"Authorization": f"Bearer {tokens[caller]}"} if caller in tokens else {}
        for method, path in order:
            url = re.sub(r"\{(\w+)\}", lambda m: str(values[m[1]]), path)
            if method == "GET":
                r = client.get(url, headers=headers, follow_redirects=False)
            elif path.endswith("/suggestions"):
                r = client.post(url, headers=headers, content=b"")
            else:
                r = client.request(method, url, headers=headers, json=BODIES.get((method, path), {}))
            got, want = outcome(method, path, r), table[method, path][caller]
            if got != want:
                wrong.append((caller, method, path, want, got, r.status_code, r.text[:160]))
    assert not wrong, "\n".join(map(str, wrong))


def test_every_state_changing_labelx_route_refuses_a_session_without_its_csrf_token(app, env) -> None:
    """A browser sends the session cookie on any request another site makes it send; only the
    page's ``X-CSRF-Token`` proves the page sent it. Every route that is not GET, walked from
    the route table (the admin's session: every role check would pass), refuses a request
    without the token, or with another session's, before it does anything."""
    admin, other = Session(app, "admin"), Session(app, "rita")
    project = make_project(admin)
    task = ok(admin.get(f"/api/projects/{project['id']}/tasks"))[0]
    item = ok(admin.get(f"/api/tasks/{task['id']}"))["items"][0]["id"]
    values = {"project_id": project["id"], "task_id": task["id"], "item_id": item, "fmt": "csv"}
    writes = sorted((m, p) for m, p in routes(app) if m not in ("GET", "MOUNT") and p != "/login")
    assert len(writes) >= 14, writes
    for method, path in writes:
        url = re.sub(r"\{(\w+)\}", lambda m: str(values[m[1]]), path)
        body = BODIES.get((method, path), {})
        for headers in ({}, {"X-CSRF-Token": other.csrf}):
            r = admin.client.request(method, url, json=body, headers=headers, follow_redirects=False)
            assert r.status_code == 403 and "CSRF" in r.text, (
                method,
                path,
                headers,
                r.status_code,
                r.text[:200],
            )
    # nothing happened: still logged in, the task still alice's, no project made
    assert ok(admin.get("/api/me"))["name"] == "admin"
    assert [p["name"] for p in ok(admin.get("/api/projects"))] == [project["name"]]
    assert ok(admin.get(f"/api/tasks/{task['id']}"))["task"]["assignee"] == "alice"
