"""A commit retried after a crash, once another writer committed in between, and the commit after it.

The commit id of a project's n-th export is ``labelx-<instance>-<project>-export-<n>``, n counted
from its recorded exports. A crash between the catalog's commit and that record left a version
the project did not count. Its retry recognised it only while it was the dataset's head: after
another writer's commit, the retry found the head holding the labels, said "they count as
committed now" and recorded no export, so the NEXT commit, of newly accepted labels, reused the
crashed export's id: the catalog answered with that old version, the new labels were not written,
and the commit reported success with the old version. Now any commit first takes the project's
own unrecorded version as the retry's answer (recorded, its labels marked), so the next commit
makes a version holding exactly the new labels."""

from __future__ import annotations

import pytest

from datahub.catalog import Patch
from datahub.errors import StorageError
from labelx.export import commit_labels
from labelx.service import LabelService
from labelx.store import LabelStore
from tests.labelx.conftest import SCHEMA


def _accept(store: LabelStore, admin, item_id: int, value: str) -> None:
    it = store.get_item(item_id)
    store.save_value(it.id, admin.id, it.version, value, "annotated")
    store.submit_task(it.task_id)
    store.review(it.id, admin.id, store.get_item(it.id).version, True, "")


def test_the_commit_after_a_recovered_crash_writes_the_new_labels(env, tmp_path, monkeypatch):
    store = LabelStore(tmp_path / "lx.db")
    admin = store.create_user("admin", "admin", "x")
    service = LabelService(store, env.catalog)
    project = service.create_project(admin, name="p", dataset="pets", schema=SCHEMA, task_size=12)
    for key in env.keys[1:3]:
        _accept(store, admin, store.item_by_key(project.id, key).id, "dog")

    real = store.record_export

    def crash(*args, **kwargs):
        raise StorageError("disk vanished after the catalog commit")

    monkeypatch.setattr(store, "record_export", crash)
    with pytest.raises(StorageError):
        commit_labels(service, admin, project.id)
    monkeypatch.setattr(store, "record_export", real)
    assert env.catalog.store.head("pets") == 2  # the crashed export's version
    other = env.catalog.commit("pets", [Patch(env.keys[10], labels={"class": "bird"})], message="cli relabel")
    assert other.seq == 3

    again = commit_labels(service, admin, project.id)  # the retry: the version it made, recorded
    assert again.seq == 2 and env.catalog.store.head("pets") == 3
    assert store.count_changed(project.id) == 0
    assert [e["seq"] for e in store.list_exports(project.id)] == [2]

    _accept(store, admin, store.item_by_key(project.id, env.keys[5]).id, "bird")
    new = commit_labels(service, admin, project.id)
    assert (new.seq, new.modified) == (4, 1), new
    assert env.catalog.get_record("pets", 4, env.keys[5]).labels["class"] == "bird"
    assert [d.key for d in env.catalog.diff("pets", 3, 4)] == [env.keys[5]]
    assert store.count_changed(project.id) == 0
    store.close()
