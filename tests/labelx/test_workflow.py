"""Projects, annotation, concurrency, review and commit through the real catalog."""

from __future__ import annotations

import json
import re
import shlex
import threading

from PIL import Image

from labelx.app import create_labelx_app
from tests.labelx.conftest import SCHEMA, Session, add_users, make_project, ok


def _task(s: Session, pid: int) -> dict:
    tid = ok(s.get(f"/api/projects/{pid}/tasks"))[0]["id"]
    return ok(s.get(f"/api/tasks/{tid}"))


def test_project_snapshots_the_version_into_tasks(app, env):
    admin = Session(app, "admin")
    p = make_project(admin)
    assert (p["dataset"], p["version"], p["item_count"]) == ("pets", 1, 12)
    tasks = ok(admin.get(f"/api/projects/{p['id']}/tasks"))
    assert [(t["number"], t["assignee"], t["total"]) for t in tasks] == [(1, "alice", 6), (2, "bob", 6)]
    items = _task(admin, p["id"])["items"]
    assert [i["key"] for i in items] == env.keys[:6]
    # labels already in the version are shown (and are the starting value)
    assert items[0]["original"] == items[0]["value"] == "cat"
    assert items[1]["original"] is None


def test_project_narrowed_by_prefix_and_filter(app, env):
    admin = Session(app, "admin")
    by_filter = make_project(admin, "only-cats", filter="labels.class=cat")
    assert by_filter["item_count"] == 1
    by_prefix = make_project(admin, "prefix", prefix="img/001")
    assert by_prefix["item_count"] == 2  # img/0010.jpg, img/0011.jpg


def test_bad_project_input_changes_nothing(app):
    admin = Session(app, "admin")
    base = {"name": "ok-name", "dataset": "pets", "schema": SCHEMA}
    cases = [
        {"name": "Bad Name!"},
        {"dataset": "nope"},
        {"version": 7},
        {"prefix": "../etc"},
        {"filter": "labels.class~cat"},
        {"schema": {"kind": "segmentation", "classes": ["a"]}},
        {"schema": {"classes": []}},
        {"schema": {"classes": [{"name": "a", "key": "1"}, {"name": "b", "key": "1"}]}},
        {"schema": {"classes": [{"name": "a", "color": "red"}]}},
        {"filter": "labels.class=unicorn"},  # would be empty
        {"task_size": 0},
    ]
    for extra in cases:
        resp = admin.post("/api/projects", base | extra)
        assert resp.status_code in (400, 404), (extra, resp.text)
        assert resp.json()["error"]["message"]
    assert ok(admin.get("/api/projects")) == []


def test_stale_write_is_refused_never_overwritten(app):
    admin = Session(app, "admin")
    pid = make_project(admin)["id"]
    alice = Session(app, "alice")
    item = _task(alice, pid)["items"][1]
    first = ok(alice.put(f"/api/items/{item['id']}", {"version": item["version"], "value": "dog"}))
    assert first["version"] == item["version"] + 1
    stale = alice.put(f"/api/items/{item['id']}", {"version": item["version"], "value": "bird"})
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "conflict"
    now = _task(alice, pid)["items"][1]
    assert (now["value"], now["version"]) == ("dog", first["version"])


def test_two_users_cannot_take_the_same_item(app):
    admin = Session(app, "admin")
    pid = make_project(admin)["id"]
    alice = Session(app, "alice")
    item = _task(alice, pid)["items"][2]
    ok(alice.post(f"/api/items/{item['id']}/claim"))
    taken = admin.post(f"/api/items/{item['id']}/claim")
    assert taken.status_code == 409 and "alice" in taken.json()["error"]["message"]
    # nor write it while alice holds it
    assert (
        admin.put(f"/api/items/{item['id']}", {"version": item["version"], "value": "cat"}).status_code == 409
    )
    ok(alice.put(f"/api/items/{item['id']}", {"version": item["version"], "value": "cat"}))
    # once she moves on and releases it, the admin may take it (with the current version)
    assert ok(admin.post(f"/api/items/{item['id']}/release"))  # not his claim: a no-op
    assert admin.post(f"/api/items/{item['id']}/claim").status_code == 409
    ok(alice.post(f"/api/items/{item['id']}/release"))
    ok(admin.post(f"/api/items/{item['id']}/claim"))
    ok(admin.put(f"/api/items/{item['id']}", {"version": item["version"] + 1, "value": "dog"}))


def test_claims_expire(app):
    admin = Session(app, "admin")
    pid = make_project(admin)["id"]
    alice = Session(app, "alice")
    item = _task(alice, pid)["items"][2]
    ok(alice.post(f"/api/items/{item['id']}/claim"))
    store = app.state.labelx.store
    real_clock = store.clock
    store.clock = lambda: real_clock() + 601  # past the 10-minute lease
    ok(admin.post(f"/api/items/{item['id']}/claim"))
    store.clock = real_clock


def test_unassigned_tasks_are_claimed_atomically(app):
    """Many annotators race for tasks at once: every task ends with exactly one owner."""
    names = [f"ann{i}" for i in range(6)]
    add_users(app, **dict.fromkeys(names, "annotator"))
    admin = Session(app, "admin")
    body = {"name": "pool", "dataset": "pets", "schema": SCHEMA, "task_size": 3, "annotators": names}
    pid = ok(admin.post("/api/projects", body | {"assign": "claim"}), 201)["id"]
    store, service = app.state.labelx.store, app.state.labelx.service
    assert all(t["assignee"] is None for t in store.list_tasks(pid))
    assert [p["name"] for p in ok(Session(app, "ann0").get("/api/projects"))] == ["pool"]  # a member sees it
    got: dict[str, int | str] = {}
    barrier = threading.Barrier(len(names))

    def take(name: str) -> None:
        barrier.wait()
        try:
            got[name] = service.take_next_task(store.user_by_name(name), pid)
        except Exception as exc:
            got[name] = type(exc).__name__

    threads = [threading.Thread(target=take, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    taken = [v for v in got.values() if isinstance(v, int)]
    assert len(taken) == 4 and len(set(taken)) == 4  # 12 items / 3 = 4 tasks, each won once
    assert sorted(v for v in got.values() if isinstance(v, str)) == ["NotFound", "NotFound"]
    owners = {t["id"]: t["assignee"] for t in store.list_tasks(pid)}
    assert all(owners[tid] == name for name, tid in got.items() if isinstance(tid, int))


def test_label_submit_review_reject_fix_accept_commit(app, env):
    admin = Session(app, "admin")
    pid = make_project(admin)["id"]
    alice, rita = Session(app, "alice"), Session(app, "rita")
    view = _task(alice, pid)
    tid, items = view["task"]["id"], view["items"]
    wanted = {0: "cat", 1: "dog", 2: "bird", 3: "dog", 4: None, 5: "cat"}  # 4 is skipped
    for i, it in enumerate(items[:5]):
        skip = wanted[i] is None
        ok(alice.put(f"/api/items/{it['id']}", {"version": it["version"], "value": wanted[i], "skip": skip}))
    early = alice.post(f"/api/tasks/{tid}/submit")
    assert early.status_code == 409 and "img/0005.jpg" in early.json()["error"]["message"]
    ok(alice.put(f"/api/items/{items[5]['id']}", {"version": 0, "value": "cat"}))
    assert ok(alice.post(f"/api/tasks/{tid}/submit")) == {"submitted": 5}

    queue = ok(rita.get(f"/api/projects/{pid}/review"))
    assert [q["key"] for q in queue] == [items[i]["key"] for i in (0, 1, 2, 3, 5)]
    by_key = {q["key"]: q for q in queue}
    reject = by_key[items[3]["key"]]
    no_reason = rita.post(
        f"/api/items/{reject['id']}/review", {"version": reject["version"], "accept": False}
    )
    assert no_reason.status_code == 400
    ok(
        rita.post(
            f"/api/items/{reject['id']}/review",
            {"version": reject["version"], "accept": False, "comment": "it is a bird"},
        )
    )
    for q in queue:
        if q["id"] != reject["id"]:
            ok(rita.post(f"/api/items/{q['id']}/review", {"version": q["version"], "accept": True}))

    # the rejected item went back to alice with the comment; she fixes it and resubmits
    back = next(i for i in _task(alice, pid)["items"] if i["id"] == reject["id"])
    assert (back["status"], back["comment"]) == ("rejected", "it is a bird")
    ok(alice.put(f"/api/items/{back['id']}", {"version": back["version"], "value": "bird"}))
    assert ok(alice.post(f"/api/tasks/{tid}/submit")) == {"submitted": 1}
    again = ok(rita.get(f"/api/projects/{pid}/review"))
    assert [q["id"] for q in again] == [back["id"]]
    ok(rita.post(f"/api/items/{back['id']}/review", {"version": again[0]["version"], "accept": True}))

    # only an admin commits; the new version holds exactly the changed labels
    assert rita.post(f"/api/projects/{pid}/commit", {}).status_code == 403
    v = ok(admin.post(f"/api/projects/{pid}/commit", {"message": "first pass"}))
    assert (v["dataset"], v["seq"]) == ("pets", 2)
    version = env.catalog.resolve("pets", 2)
    # img/0000 was already "cat" (unchanged: not written); 0004 skipped: not written
    assert version.modified == 4 and version.added == version.removed == 0
    assert version.lineage["project"] == "pets-cls" and version.lineage["schema"]["kind"] == "classification"
    assert "pets-cls" in version.lineage["description"] and "cat,dog,bird" in version.lineage["description"]
    labels = {r.key: dict(r.labels) for r in env.catalog.list_records("pets", 2)}
    expect = {env.keys[0]: {"class": "cat"}, env.keys[1]: {"class": "dog"}, env.keys[2]: {"class": "bird"},
              env.keys[3]: {"class": "bird"}, env.keys[5]: {"class": "cat"}}  # fmt: skip
    assert {k: v for k, v in labels.items() if v} == expect
    diff = {d.key for d in env.catalog.diff("pets", 1, 2)}
    assert diff == {env.keys[i] for i in (1, 2, 3, 5)}
    # nothing new: a second commit is refused (409: the state, not the request, is wrong), writes nothing
    assert admin.post(f"/api/projects/{pid}/commit", {}).status_code == 409
    assert env.catalog.resolve("pets", None).seq == 2
    stats = ok(admin.get(f"/api/projects/{pid}/stats"))
    assert stats["exports"][0]["seq"] == 2 and stats["exports"][0]["changed"] == 4


def test_commit_into_a_new_dataset(app, env):
    admin = Session(app, "admin")
    pid = make_project(admin, task_size=12, annotators=["alice"])["id"]
    alice = Session(app, "alice")
    view = _task(alice, pid)
    for it in view["items"]:
        ok(alice.put(f"/api/items/{it['id']}", {"version": it["version"], "value": "dog"}))
    ok(alice.post(f"/api/tasks/{view['task']['id']}/submit"))
    for q in ok(admin.get(f"/api/projects/{pid}/review")):
        ok(admin.post(f"/api/items/{q['id']}/review", {"version": q["version"], "accept": True}))
    v = ok(admin.post(f"/api/projects/{pid}/commit", {"to_dataset": "pets-relabelled"}))
    assert (v["dataset"], v["seq"]) == ("pets-relabelled", 1)
    recs = list(env.catalog.list_records("pets-relabelled", 1))
    assert len(recs) == 12 and all(r.labels["class"] == "dog" for r in recs)
    assert recs[3].meta == {"i": 3}  # the rest of the record is carried over
    assert env.catalog.resolve("pets", None).seq == 1  # the source dataset is untouched


def test_images_are_served_resized_through_the_cache(app, env):
    admin = Session(app, "admin")
    pid = make_project(admin)["id"]
    item = _task(admin, pid)["items"][0]
    thumb = admin.get(f"/api/items/{item['id']}/image?size=thumb")
    assert thumb.status_code == 200 and thumb.headers["content-type"] == "image/jpeg"
    import io

    with Image.open(io.BytesIO(thumb.content)) as im:
        assert max(im.size) <= 192
    original = admin.get(f"/api/items/{item['id']}/image?size=original").content
    store, key = env.stores.for_url(env.catalog.get_record("pets", 1, item["key"]).url)
    assert original == store.read(key)
    assert admin.get(f"/api/items/{item['id']}/image?size=huge").status_code == 400
    assert env.cache.stats()  # the reads went through the TieredCache


def test_changed_object_is_an_error_not_a_wrong_picture(app, env):
    admin = Session(app, "admin")
    pid = make_project(admin)["id"]
    # replaced before anything read it (opening the task would let the cache prefetch it;
    # cached pages are keyed by etag, so serving those would be right, but not this test)
    item = {"id": app.state.labelx.store.item_by_key(pid, env.keys[4]).id}
    store, key = env.stores.for_url(env.catalog.get_record("pets", 1, env.keys[4]).url)
    store.put(key, b"replaced behind our back")
    resp = admin.get(f"/api/items/{item['id']}/image?size=preview")
    assert resp.status_code == 412 and resp.json()["error"]["code"] == "object_changed"
    # it says what to do, and names neither where the object lives nor the etag of the bytes
    # it holds now (which nobody committed, and the annotator may not read)
    error = resp.json()["error"]
    assert "re-import" in error["message"] and env.keys[4] in error["message"]
    text = json.dumps(error)
    url = env.catalog.get_record("pets", 1, env.keys[4]).url
    assert store.stat(key).etag not in text and url not in text and str(store.root_url) not in text


def test_value_must_fit_the_schema(app):
    admin = Session(app, "admin")
    pid = make_project(admin)["id"]
    alice = Session(app, "alice")
    item = _task(alice, pid)["items"][1]
    for bad in ("unicorn", ["cat"], 3, {"x": 1}):
        resp = alice.put(f"/api/items/{item['id']}", {"version": item["version"], "value": bad})
        assert resp.status_code == 400, bad
    assert alice.put(f"/api/items/{item['id']}", {"value": "cat"}).status_code == 400  # no version
    assert _task(alice, pid)["items"][1]["version"] == item["version"]


def test_oversized_body_is_refused(env):
    env.config.api.max_body_bytes = 1000  # the limit is the API's middleware's, set as the app is built
    app = create_labelx_app(env.config, catalog=env.catalog, stores=env.stores, cache=env.cache)
    add_users(app, admin="admin")
    try:
        admin = Session(app, "admin")
        resp = admin.post("/api/projects", {"name": "x" * 2000})
        assert resp.status_code == 413
    finally:
        app.state.labelx.store.close()


def test_dashboard_stats_per_annotator_class_and_hour(app):
    admin = Session(app, "admin")
    pid = make_project(admin)["id"]
    for name, value in (("alice", "dog"), ("bob", "bird")):
        s = Session(app, name)
        for it in _task(s, pid)["items"][1:4]:
            ok(s.put(f"/api/items/{it['id']}", {"version": it["version"], "value": value}))
    stats = ok(admin.get(f"/api/projects/{pid}/stats"))
    assert stats["per_annotator"] == {"alice": {"annotated": 3}, "bob": {"annotated": 3}}
    assert stats["per_class"] == {"cat": {}, "dog": {"annotated": 3}, "bird": {"annotated": 3}}
    assert sum(h["items"] for h in stats["per_hour"]) == 6 and len(stats["per_hour"]) == 24
    assert stats["counts"] == {"todo": 6, "annotated": 6}


def test_opening_a_task_hints_the_cache_with_its_open_items(app, env):
    hinted: list[list[str]] = []
    real_hint = env.cache.hint

    def record(refs):
        hinted.append([r.url.rsplit("/", 1)[1] for r in refs])
        real_hint(refs)

    env.cache.hint = record  # the real cache, watched
    admin = Session(app, "admin")
    pid = make_project(admin)["id"]
    alice = Session(app, "alice")
    item = _task(alice, pid)["items"][0]
    ok(alice.put(f"/api/items/{item['id']}", {"version": item["version"], "value": "dog"}))
    _task(alice, pid)
    assert hinted[0] == [f"{i:04d}.jpg" for i in range(6)]
    assert hinted[1] == [f"{i:04d}.jpg" for i in range(1, 6)]  # the labelled one is no longer upcoming


def test_admin_reassigns_a_task(app):
    admin = Session(app, "admin")
    pid = make_project(admin)["id"]
    add_users(app, carol="annotator")
    alice, carol = Session(app, "alice"), Session(app, "carol")
    tid = ok(alice.get(f"/api/projects/{pid}/tasks"))[0]["id"]
    assert alice.put(f"/api/tasks/{tid}/assignee", {"assignee": "carol"}).status_code == 403
    ok(admin.put(f"/api/tasks/{tid}/assignee", {"assignee": "carol"}))
    assert [t["id"] for t in ok(carol.get(f"/api/projects/{pid}/tasks"))] == [tid]
    assert alice.get(f"/api/tasks/{tid}").status_code == 403
    assert admin.put(f"/api/tasks/{tid}/assignee", {"assignee": "nobody"}).status_code == 404
    ok(admin.put(f"/api/tasks/{tid}/assignee", {"assignee": None}))  # back to the pool
    assert ok(admin.get(f"/api/projects/{pid}/tasks"))[0]["assignee"] is None


def test_an_empty_project_names_a_command_that_lists_what_it_matched(app, env, tmp_path):
    """Before, the refusal said "check them with `datahub version ls`", a command that does
    not exist (argparse: invalid choice 'version', exit 2)."""
    from datahub.cli.main import main

    admin = Session(app, "admin")
    resp = admin.post(
        "/api/projects",
        {
            "name": "none",
            "dataset": "pets",
            "prefix": "img/",
            "filter": "labels.class=unicorn",
            "schema": SCHEMA,
        },
    )
    assert resp.status_code == 400
    message = resp.json()["error"]["message"]
    command = re.search(r"`datahub (.+?)`", message).group(1)
    assert command == "ls pets@v1 --prefix img/ --filter labels.class=unicorn", message
    catalog = ["--catalog", f"sqlite:///{tmp_path / 'catalog.db'}"]  # the fixture's catalog
    assert main([*catalog, *shlex.split(command)]) == 0  # it runs, and lists nothing


def test_a_misspelt_field_is_refused_and_never_erases_a_label(app, env):
    """Before, unknown fields were ignored: ``{"version": 0, "label": "dog"}`` (for ``value``)
    saved the item with no value at all (200, its label gone), and ``{"accepted": true}`` (for
    ``accept``) was read as a rejection. Now each is a 400 naming the field, and nothing changes."""
    admin = Session(app, "admin")
    pid = make_project(admin)["id"]
    alice = Session(app, "alice")
    item = _task(alice, pid)["items"][0]
    assert item["value"] == "cat"
    typo = alice.put(f"/api/items/{item['id']}", {"version": item["version"], "label": "dog"})
    assert typo.status_code == 400, typo.text
    assert "label: unknown field" in typo.json()["error"]["message"], typo.text
    kept = _task(alice, pid)["items"][0]
    assert (kept["value"], kept["version"]) == ("cat", item["version"])

    saved = ok(alice.put(f"/api/items/{item['id']}", {"version": item["version"], "value": "dog"}))
    resp = admin.post(f"/api/items/{item['id']}/review", {"version": saved["version"], "accepted": True})
    assert resp.status_code == 400 and "accepted: unknown field" in resp.json()["error"]["message"], resp.text
    assert _task(alice, pid)["items"][0]["status"] == "annotated"


def _label_all_and_accept(admin: Session, alice: Session, pid: int, value: str) -> None:
    tid = ok(alice.get(f"/api/projects/{pid}/tasks"))[0]["id"]
    for it in ok(alice.get(f"/api/tasks/{tid}"))["items"]:
        ok(alice.post(f"/api/items/{it['id']}/claim"))
        ok(alice.put(f"/api/items/{it['id']}", {"version": it["version"], "value": value}))
    ok(alice.post(f"/api/tasks/{tid}/submit"))
    for it in ok(admin.get(f"/api/tasks/{tid}"))["items"]:
        ok(admin.post(f"/api/items/{it['id']}/review", {"version": it["version"], "accept": True}))


def test_a_commit_never_overwrites_a_label_changed_at_the_head_unseen(app, env):
    """Before, a project made from pets@v1 (img/0000.jpg: cat) committed its accepted "dog"
    over the "bird" someone committed at the head (v2) after the snapshot: v3 said dog, and
    nobody who labelled it had seen "bird". Now the commit is refused (409) naming the record,
    both labels and the versions, and writes nothing; ``overwrite`` commits over it on purpose."""
    from datahub.catalog import Patch

    admin, alice = Session(app, "admin"), Session(app, "alice")
    pid = make_project(admin)["id"]
    env.catalog.commit("pets", [Patch("img/0000.jpg", labels={"class": "bird"})], message="cli relabel")
    _label_all_and_accept(admin, alice, pid, "dog")
    refused = admin.post(f"/api/projects/{pid}/commit", {})
    assert refused.status_code == 409, refused.text
    message = refused.json()["error"]["message"]
    assert "img/0000.jpg" in message and "'bird'" in message and "pets@v2" in message and "pets@v1" in message
    assert env.catalog.store.head("pets") == 2  # nothing written
    assert env.catalog.get_record("pets", 2, "img/0000.jpg").labels == {"class": "bird"}

    done = ok(admin.post(f"/api/projects/{pid}/commit", {"overwrite": True}))
    assert (done["seq"], env.catalog.get_record("pets", 3, "img/0000.jpg").labels) == (3, {"class": "dog"})
