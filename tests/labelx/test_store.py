"""Store-level promises: session expiry (injected clock), export bookkeeping, crash-safe commits."""

from __future__ import annotations

import pytest

from datahub.errors import StorageError
from labelx.auth import Auth, hash_password
from labelx.export import commit_labels
from labelx.service import LabelService
from labelx.store import LabelStore
from tests.labelx.conftest import SCHEMA


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_sessions_expire(tmp_path):
    clock = Clock()
    store = LabelStore(tmp_path / "lx.db", clock=clock)
    store.create_user("alice", "annotator", hash_password("long enough"))
    auth = Auth(store)
    sid, csrf = auth.login("alice", "long enough")
    assert auth.from_session(sid).csrf == csrf
    clock.now += 11 * 3600
    assert auth.from_session(sid) is not None
    clock.now += 2 * 3600
    assert auth.from_session(sid) is None
    store.close()


def _accepted_project(env, tmp_path, n_labels: int):
    store = LabelStore(tmp_path / "lx.db")
    admin = store.create_user("admin", "admin", "x")
    service = LabelService(store, env.catalog)
    project = service.create_project(admin, name="p", dataset="pets", schema=SCHEMA, task_size=12)
    items = store.task_items(store.list_tasks(project.id)[0]["id"])
    for it in items[1 : 1 + n_labels]:
        store.save_value(it.id, admin.id, it.version, "dog", "annotated")
    store.submit_task(items[0].task_id)
    for it in items[1 : 1 + n_labels]:
        cur = store.get_item(it.id)
        store.review(it.id, admin.id, cur.version, True, "")
    return store, service, admin, project


def test_only_new_changes_are_exported_again(env, tmp_path):
    store, service, admin, project = _accepted_project(env, tmp_path, 3)
    assert commit_labels(service, admin, project.id).modified == 3
    # relabel one exported item: the next commit writes just that one
    it = store.item_by_key(project.id, env.keys[2])
    store.save_value(it.id, admin.id, it.version, "bird", "annotated")
    store.submit_task(it.task_id)
    store.review(it.id, admin.id, store.get_item(it.id).version, True, "")
    v3 = commit_labels(service, admin, project.id)
    assert (v3.seq, v3.modified) == (3, 1)
    assert [d.key for d in env.catalog.diff("pets", 2, 3)] == [env.keys[2]]
    store.close()


def test_commit_retried_after_a_crash_makes_one_version(env, tmp_path, monkeypatch):
    store, service, admin, project = _accepted_project(env, tmp_path, 2)
    real = store.record_export

    def crash(*args, **kwargs):
        raise StorageError("disk vanished after the catalog commit")

    monkeypatch.setattr(store, "record_export", crash)
    with pytest.raises(StorageError):
        commit_labels(service, admin, project.id)
    assert env.catalog.resolve("pets", None).seq == 2  # the catalog has the version …
    monkeypatch.setattr(store, "record_export", real)
    again = commit_labels(service, admin, project.id)  # … and the retry returns it, not a v3
    assert again.seq == 2 and env.catalog.resolve("pets", None).seq == 2
    assert store.count_changed(project.id) == 0
    store.close()


def test_commit_retried_after_a_crash_and_an_edit_makes_one_version(env, tmp_path, monkeypatch):
    """The export's commit id now comes with other changes (a label edited between the crash and
    the retry): the catalog answers 409 commit_id_reused, and LabelX takes that version as its
    export, marking only what it holds; the edit stays pending for the next commit."""
    store, service, admin, project = _accepted_project(env, tmp_path, 2)
    real = store.record_export

    def crash(*args, **kwargs):
        raise StorageError("disk vanished after the catalog commit")

    monkeypatch.setattr(store, "record_export", crash)
    with pytest.raises(StorageError):
        commit_labels(service, admin, project.id)
    monkeypatch.setattr(store, "record_export", real)
    it = store.item_by_key(project.id, env.keys[2])
    store.save_value(it.id, admin.id, it.version, "bird", "annotated")
    store.submit_task(it.task_id)
    store.review(it.id, admin.id, store.get_item(it.id).version, True, "")
    again = commit_labels(service, admin, project.id)
    assert again.seq == 2 and env.catalog.resolve("pets", None).seq == 2
    assert store.count_changed(project.id) == 1  # the edit to "bird" is still to be exported
    v3 = commit_labels(service, admin, project.id)
    assert (v3.seq, v3.modified) == (3, 1)
    assert env.catalog.get_record("pets", 3, env.keys[2]).labels["class"] == "bird"
    store.close()


def test_failed_project_creation_leaves_nothing(env, tmp_path):
    store = LabelStore(tmp_path / "lx.db")
    admin = store.create_user("admin", "admin", "x")

    class Broken:
        """A catalog whose listing fails half way (e.g. the connection drops)."""

        def resolve(self, dataset, ref):
            return env.catalog.resolve(dataset, ref)

        def list_records(self, *args, **kwargs):
            for n, rec in enumerate(env.catalog.list_records(*args, **kwargs)):
                if n == 5:
                    raise StorageError("catalog connection lost")
                yield rec

    with pytest.raises(StorageError):
        LabelService(store, Broken()).create_project(
            admin, name="p", dataset="pets", schema=SCHEMA, task_size=2
        )
    assert store.list_projects() == []
    assert store._conn().execute("SELECT COUNT(*) FROM items").fetchone()[0] == 0
    assert store._conn().execute("SELECT COUNT(*) FROM tasks").fetchone()[0] == 0
    store.close()
