"""The lineage graph of a real derive -> LabelX -> commit -> pack chain shows every edge.

Every step is the real producer: ``Catalog.derive``, LabelX's API (label, submit, accept,
commit), a plain commit, and ``datahub.pack``; the browser reads the lineage each one wrote.
"""

from __future__ import annotations

import pytest

from datahub.catalog import Patch
from datahub.cli.serve_cmd import build_app
from datahub.pack import PackSpec, TransformSpec, pack
from tests.browser.chrome import chrome  # noqa: F401 - the fixture
from tests.browser.conftest import serving
from tests.labelx.conftest import Session, add_users, ok

pytestmark = [pytest.mark.browser, pytest.mark.slow]
EDGES = {
    ("pets@v2", "cats@v1", "derive"),
    ("cats@v1", "cats@v2", "labelx"),
    ("cats@v2", "cats@v3", "commit"),
    ("cats@v3", "cats-64@v1", "pack"),
}


def labelx_of(app):
    return next(r.app for r in app.routes if getattr(r, "path", "") == "/labelx")


def make_chain(env, app) -> None:
    env.catalog.derive("pets", 2, "labels.class=cat", to_dataset="cats", author="alice")
    lx = labelx_of(app)
    add_users(lx, admin="admin", alice="annotator")
    admin, alice = Session(lx, "admin"), Session(lx, "alice")
    body = {
        "name": "cats-check",
        "dataset": "cats",
        "version": 1,
        "schema": {"kind": "classification", "classes": ["cat", "dog"]},
        "annotators": ["alice"],
    }
    pid = ok(admin.post("/api/projects", body), 201)["id"]
    tid = ok(alice.get(f"/api/projects/{pid}/tasks"))[0]["id"]
    items = ok(alice.get(f"/api/tasks/{tid}"))["items"]
    for n, item in enumerate(items):
        value = "dog" if n == 0 else "cat"
        ok(alice.put(f"/api/items/{item['id']}", {"version": item["version"], "value": value}))
    ok(alice.post(f"/api/tasks/{tid}/submit"))
    for q in ok(admin.get(f"/api/projects/{pid}/review")):
        ok(admin.post(f"/api/items/{q['id']}/review", {"version": q["version"], "accept": True}))
    assert ok(admin.post(f"/api/projects/{pid}/commit", {"message": "checked"}))["seq"] == 2
    first = items[1]["key"]
    env.catalog.commit("cats", [Patch(first, meta={"reviewed": True})], message="mark reviewed", author="bob")
    spec = PackSpec(TransformSpec(resize="64x64", crop="center"))
    pack(env.config, env.catalog, "cats@v3", "cats-64", spec, workers=0, author="carol")


def test_the_lineage_graph_of_a_derive_labelx_commit_pack_chain(chrome, env):  # noqa: F811
    app, cache = build_app(env.config, env.catalog, env.stores, labelx=True)
    try:
        make_chain(env, app)
        with serving(app) as base:
            chrome.visit(f"{base}/datasets/cats", "20-lineage-cats")
            edges = {
                (g.get_attribute("data-source"), g.get_attribute("data-target"), g.get_attribute("data-kind"))
                for g in chrome.find_all("#lineage g.edge")
            }
            assert edges == EDGES
            nodes = {a.get_attribute("data-node") for a in chrome.find_all("#lineage a.node")}
            assert nodes == {"pets@v2", "cats@v1", "cats@v2", "cats@v3", "cats-64@v1"}
            # every node links to its version
            chrome.find('#lineage a.node[data-node="cats-64@v1"]').click()
            chrome.wait_for_url(lambda url: url.endswith("/datasets/cats-64/versions/1"))
            chrome.check("21-packed-version")
            assert chrome.find("#version-title").text.startswith("cats-64@v1")
            # the packed dataset's own page draws the same pack edge from its source
            chrome.visit(f"{base}/datasets/cats-64", "22-lineage-packed")
            made = chrome.find_all('#lineage g.edge[data-source="cats@v3"][data-target="cats-64@v1"]')
            assert [g.get_attribute("data-kind") for g in made] == ["pack"]
            chrome.visit(f"{base}/datasets/pets", "23-lineage-pets")
            assert chrome.find_all('#lineage g.edge[data-source="pets@v2"][data-target="cats@v1"]')
    finally:
        cache.close()


@pytest.mark.parametrize(
    ("lineage", "kind", "detail"),
    [
        ({"import": {"source": "/data/pets"}}, "import", "/data/pets"),
        ({"workspace": "run-42"}, "workspace", "run-42"),
        ({"source": "labelx", "from": "pets@v2", "project": "review"}, "labelx", "project review"),
        ({"kind": "pack", "source_dataset": "pets", "source_version": 2, "params": {"resize": "64x64"}},
         "pack", "resize=64x64"),
        ({"snapshot_of": "s3://b/p"}, "snapshot", "of s3://b/p"),
    ],
)  # fmt: skip
def test_made_by_never_repeats_the_kind(lineage, kind, detail):
    """Issue 37 item 7: the dataset page's "Made by" read "import import /data/pets"."""
    from datahub.browser.lineage import origin

    o = origin(lineage)
    assert (o.kind, o.detail) == (kind, detail)
