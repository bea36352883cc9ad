"""review17c: an adversarial review of merge17's three-way workspace commit.

``commit_workspace`` deletes a head file the workspace lacks only if this journal committed
that very record (``_Base``, the journal meta ``committed:<dataset>``) and nobody changed or
labeled it since (docs/writeback.md, "A commit applies the workspace's changes"). Real stores
throughout: local object stores, an SQLite catalog file, real LMDB journals.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from datahub.catalog import Patch
from datahub.workspaces import commit_workspace
from tests.writeback import test_merge17
from tests.writeback.conftest import write
from tests.writeback.test_commit_history import read_version
from tests.writeback.test_merge17 import DATASET, _overrides, _sha
from tests.writeback.test_nodeloss18 import made_before

nodes, catalog = test_merge17.nodes, test_merge17.catalog  # its fixtures: nodes A and B, their catalog


def _labels(catalog) -> dict[str, dict]:
    """key -> the labels of each file of the dataset's head."""
    return {r.key: dict(r.labels) for r in catalog.list_records(DATASET)}


@pytest.mark.parametrize("between", ["a commit of another change", "a commit of no change"])
def test_a_file_labeled_after_its_commit_is_kept_when_the_workspace_deletes_it_later(
    nodes, catalog, between: str
) -> None:
    """A user labels a file the workspace committed; the workspace commits again without
    touching it (its record is the head's, labels and all), then deletes it. The label makes
    the record someone else's (docs/writeback.md): the delete must keep it. Before, the
    second commit took the labeled head record into the journal's base as the workspace's
    own (``_head_blobs`` hands back the head's record, labels included), and the third
    commit deleted the labeled file from the head."""
    ws = nodes["node-a"].open()
    write(ws, "sample.png", b"a sample a user will label")
    write(ws, "log.txt", b"epoch 1")
    commit_workspace(ws, catalog, DATASET)
    catalog.commit(DATASET, [Patch("sample.png", labels={"class": "cat"})], message="a user's label")

    if between == "a commit of another change":
        write(ws, "log.txt", b"epoch 1\nepoch 2")
        assert commit_workspace(ws, catalog, DATASET).seq == 3
    else:
        assert commit_workspace(ws, catalog, DATASET).seq == 2  # nothing changed: the head
    ws.unlink("sample.png")
    commit_workspace(ws, catalog, DATASET)
    assert _labels(catalog)["sample.png"] == {"class": "cat"}


def test_a_file_with_metadata_another_writer_committed_is_not_taken_for_the_workspaces(
    nodes, catalog
) -> None:
    """Another node's journal (no base) holds a file of the same bytes at the key of a head
    record that carries metadata (someone else's record): committing it changes nothing, and
    deleting it afterwards must not delete that record either."""
    a = nodes["node-a"].open()
    write(a, "shared.bin", b"the same bytes on both nodes")
    commit_workspace(a, catalog, DATASET)
    a.close()
    catalog.commit(DATASET, [Patch("shared.bin", meta={"source": "node a's run"})], message="annotated")

    b = nodes["node-b"].open()
    write(b, "shared.bin", b"the same bytes on both nodes")
    write(b, "b.txt", b"node b's own")
    commit_workspace(b, catalog, DATASET)
    b.unlink("shared.bin")
    commit_workspace(b, catalog, DATASET)
    assert {r.key: r.checksum for r in catalog.list_records(DATASET)} == {
        "b.txt": _sha(b"node b's own"),
        "shared.bin": _sha(b"the same bytes on both nodes"),
    }


def test_a_commit_that_lost_the_race_to_another_journal_merges_on_the_new_head_when_retried(
    nodes, catalog, monkeypatch
) -> None:
    """Two journals commit to one dataset at once: node B's commit lands between node A's
    listing of the head and A's catalog commit, and puts B's own file at a key A deletes.
    A's commit names its base, so the catalog refuses it (StaleBase, nothing written); A's
    retry computes its deletes against the new head: B's file stays, A's own delete and put
    land, and no version holds A's half."""
    from datahub.catalog import Catalog
    from datahub.errors import StaleBase

    a = nodes["node-a"].open()
    write(a, "gone", b"a's file, deleted next")
    write(a, "kept", b"a's kept file")
    commit_workspace(a, catalog, DATASET)
    a.unlink("gone")
    write(a, "new", b"a's new file")

    b = nodes["node-b"].open()
    write(b, "gone", b"node b's own file at that key")
    real_commit = Catalog.commit

    def b_first(self, *args, **kwargs):
        monkeypatch.setattr(Catalog, "commit", real_commit)
        commit_workspace(b, catalog, DATASET)  # B wins the race
        return real_commit(self, *args, **kwargs)

    monkeypatch.setattr(Catalog, "commit", b_first)
    with pytest.raises(StaleBase):
        commit_workspace(a, catalog, DATASET)
    assert {r.key: r.checksum for r in catalog.list_records(DATASET)} == {
        "gone": _sha(b"node b's own file at that key"),
        "kept": _sha(b"a's kept file"),
    }
    version = commit_workspace(a, catalog, DATASET)
    assert (version.seq, version.added, version.removed) == (3, 1, 0)
    assert {r.key: r.checksum for r in catalog.list_records(DATASET)} == {
        "gone": _sha(b"node b's own file at that key"),
        "kept": _sha(b"a's kept file"),
        "new": _sha(b"a's new file"),
    }


_KILLED_BEFORE_THE_CATALOG_COMMIT = """
import json, os, signal, sys
from datahub.catalog import Catalog, open_catalog
from datahub.config import load_config
from datahub.storage import StoreRegistry
from datahub.writeback import open_workspace
import datahub.workspaces as workspaces

config = load_config(env={}, overrides=json.loads(sys.argv[1]))
with StoreRegistry(config) as stores:
    ws = open_workspace("ws", config, stores, background=False)
    with ws.open("new", create=True, truncate=True) as fh:
        fh.write(0, b"acknowledged, its commit killed")
    with ws.open("changed", truncate=True) as fh:
        fh.write(0, b"changed, its commit killed")
    ws.unlink("gone")
    def die(self, *args, **kwargs):  # the journal stored the union; the catalog never hears
        os.kill(os.getpid(), signal.SIGKILL)
    Catalog.commit = die
    workspaces.commit_workspace(ws, open_catalog(config.resolved_catalog_url), "run")
"""


def test_a_kill_before_the_catalog_commit_then_commits_from_another_node_and_the_same_journal(
    nodes, catalog, tmp_path: Path
) -> None:
    """kill -9 after ``expect`` stored the union and before the catalog commit: nothing
    landed. Another node's journal (no base) then commits its own file and deletes nothing;
    the same journal's next commit (the workspace reopened after the crash) makes the lost
    commit's changes: its put, its change and its delete, and keeps node B's file."""
    import json
    import signal
    import subprocess
    import sys

    env = nodes["node-a"]
    ws = env.open()
    for key in ("gone", "changed", "kept"):
        write(ws, key, f"{key}, first commit".encode())
    commit_workspace(ws, catalog, DATASET)
    ws.close()
    run = subprocess.run(
        [sys.executable, "-c", _KILLED_BEFORE_THE_CATALOG_COMMIT, json.dumps(_overrides(tmp_path, "node-a"))],
        capture_output=True,
        timeout=120,
    )
    assert run.returncode == -signal.SIGKILL, run.stderr.decode()[-2000:]
    first = {key: _sha(f"{key}, first commit".encode()) for key in ("gone", "changed", "kept")}
    assert {r.key: r.checksum for r in catalog.list_records(DATASET)} == first  # nothing landed

    b = nodes["node-b"].open()
    write(b, "from-b", b"node b's file")
    assert (commit_workspace(b, catalog, DATASET).removed, len(list(catalog.list_records(DATASET)))) == (0, 4)
    b.close()

    a = env.open()  # recovery after the kill
    version = commit_workspace(a, catalog, DATASET)
    assert (version.added, version.removed, version.modified) == (1, 1, 1)
    assert {r.key: r.checksum for r in catalog.list_records(DATASET)} == {
        "changed": _sha(b"changed, its commit killed"),
        "from-b": _sha(b"node b's file"),
        "kept": first["kept"],
        "new": _sha(b"acknowledged, its commit killed"),
    }


def test_a_retry_after_a_lost_reply_makes_no_second_version_and_misses_no_delete(
    nodes, catalog, monkeypatch
) -> None:
    """The catalog committed, then its reply was lost (the caller saw CatalogUnavailable):
    the retry finds its changes in the head and makes no version. A file that only a commit
    whose reply was lost put, removed before the retry, is deleted by it: the journal kept
    the union of the records (``expect``), though ``settle`` never ran."""
    from datahub.catalog import Catalog
    from datahub.errors import CatalogUnavailable

    ws = nodes["node-a"].open()
    for key in ("gone", "later-gone", "kept"):
        write(ws, key, key.encode())
    commit_workspace(ws, catalog, DATASET)
    ws.unlink("gone")
    write(ws, "new", b"new")
    real_commit = Catalog.commit

    def reply_lost(self, *args, **kwargs):
        real_commit(self, *args, **kwargs)
        raise CatalogUnavailable("the reply was lost (injected after the commit)")

    def commit_with_its_reply_lost() -> None:
        with monkeypatch.context() as patched:
            patched.setattr(Catalog, "commit", reply_lost)
            with pytest.raises(CatalogUnavailable):
                commit_workspace(ws, catalog, DATASET)

    commit_with_its_reply_lost()
    assert commit_workspace(ws, catalog, DATASET).seq == 2  # the lost reply's version, no other
    assert sorted(r.key for r in catalog.list_records(DATASET)) == ["kept", "later-gone", "new"]

    write(ws, "newer", b"put by a commit whose reply was lost")
    commit_with_its_reply_lost()  # v3; the journal never heard of it (no settle)
    ws.unlink("newer")
    ws.unlink("later-gone")
    version = commit_workspace(ws, catalog, DATASET)
    assert (version.seq, version.added, version.removed) == (4, 0, 2)
    assert sorted(r.key for r in catalog.list_records(DATASET)) == ["kept", "new"]


@pytest.mark.parametrize("layout", ["journal folders", "made before nodeloss18"])
@pytest.mark.parametrize("by_b", ["overwritten", "deleted"])
def test_a_node_back_after_the_workspace_ran_elsewhere_commits_what_it_acknowledged(
    nodes, catalog, by_b: str, layout: str
) -> None:
    """Node A flushed a file and died before its commit; the workspace ran on node B, whose
    flush overwrote (or put, then deleted) the same workspace object: the objects were named by
    workspace, not by journal (as a journal made before nodeloss18 still names them; a new
    one flushes under its own folder, ``j-<id>/``, and node B's flush leaves it). Node A back
    (the CSI plugin's finish of its dead daemon) commits its acknowledged file. Before, A's
    journal took its own flush for current, no flush put the file again, and every commit
    failed (ObjectChanged, ObjectNotFound) for good. Both layouts: journals made before still
    share names, and A's commit reads the file from its workspace (``_copy_flushed``'s second
    source)."""
    if layout == "made before nodeloss18":
        for env in nodes.values():
            made_before(env, f"{env.config.resolved_objects_url}/workspaces/ws")
    a = nodes["node-a"].open()
    write(a, "ckpt", b"node a's checkpoint, flushed, never committed")
    a.flush()
    a.abandon()  # node a died before its commit

    b = nodes["node-b"].open()
    write(b, "ckpt", b"node b's checkpoint")
    commit_workspace(b, catalog, DATASET)
    if by_b == "deleted":
        b.unlink("ckpt")
        b.flush()
    b.close()

    a = nodes["node-a"].open()
    version = commit_workspace(a, catalog, DATASET)
    assert version is not None and version.seq == 2
    assert read_version(nodes["node-a"], catalog, DATASET, 2) == {
        "ckpt": b"node a's checkpoint, flushed, never committed"
    }


def test_an_evicted_file_of_a_node_back_after_the_workspace_ran_elsewhere_is_committed(
    nodes, catalog
) -> None:
    """A file evicted from the shared tier lives only in its workspace object. Named by
    workspace, ``<objects_url>/workspaces/<name>/<path>``, the same workspace on another node
    overwrote it, and the first node's acknowledged, uncommitted bytes were gone (promise 3;
    a strict xfail until nodeloss18 gave each journal a folder of its own, ``j-<id>/``)."""
    a = nodes["node-a"].open()
    write(a, "ckpt", b"node a's checkpoint, flushed and evicted, never committed")
    a.flush()
    assert a.flusher.evict(0) > 0  # the shared tier was full: its bytes live in the object only
    a.abandon()  # node a died before its commit

    b = nodes["node-b"].open()
    write(b, "ckpt", b"node b's checkpoint")
    b.flush()  # over node a's object
    b.close()

    a = nodes["node-a"].open()
    commit_workspace(a, catalog, DATASET)
    assert read_version(nodes["node-a"], catalog, DATASET, 1) == {
        "ckpt": b"node a's checkpoint, flushed and evicted, never committed"
    }


def test_a_journal_with_merge17s_record_of_its_commits_still_deletes_its_files(
    nodes, catalog, monkeypatch
) -> None:
    """merge17 kept each committed record's fields in the journal (``[url, etag, size,
    checksum, labeled]``); now a digest of them (54 bytes a file, key included, instead of
    260: docs/benchmarks.md, review17c). A journal written before still deletes the files it
    committed, and no one else's; and a file whose commit the catalog refused (merge17's
    union: one record for a key new to the base, as a settled commit's would be) is put,
    not taken for a file the workspace left unchanged."""
    import hashlib
    import json

    from datahub.catalog import Catalog
    from datahub.errors import CatalogUnavailable
    from datahub.ingest.blobs import blob_key

    env = nodes["node-a"]
    ws = env.open()
    for key in ("gone", "kept"):
        write(ws, key, key.encode())
    commit_workspace(ws, catalog, DATASET)
    refused = b"its commit was refused"
    write(ws, "refused", refused)

    def down(*args, **kwargs):
        raise CatalogUnavailable("the catalog is down (injected)")

    with monkeypatch.context() as patched:
        patched.setattr(Catalog, "commit", down)
        with pytest.raises(CatalogUnavailable):
            commit_workspace(ws, catalog, DATASET)
    fields = {
        r.key: [[r.url, r.etag, r.size, r.checksum, bool(r.meta or r.labels)]]
        for r in catalog.list_records(DATASET)
    }
    blob = blob_key(hashlib.sha256(refused).hexdigest())
    fields["refused"] = [
        [ws.blobs.url_for(blob), ws.blobs.stat(blob).etag, len(refused), _sha(refused), False]
    ]
    with ws.journal.write("merge17's format") as txn:
        txn.put_meta(f"committed:{DATASET}", json.dumps(fields))
    ws.unlink("gone")
    version = commit_workspace(ws, catalog, DATASET)
    assert (version.seq, version.added, version.removed) == (2, 1, 1)
    assert sorted(r.key for r in catalog.list_records(DATASET)) == ["kept", "refused"]
    with ws.journal.read() as txn:  # migrated (commitmem18): one meta entry per key, the old one gone
        assert txn.meta(f"committed:{DATASET}") is None
        stored = {n.partition("\0")[2]: v.split(",") for n, v in txn.metas(f"committed:{DATASET}\0")}
    assert sorted(stored) == ["kept", "refused"]
    assert all(len(idents) == 1 and len(idents[0]) == 32 for idents in stored.values())


def test_a_users_delete_or_edit_of_a_file_the_workspace_left_unchanged_stands(nodes, catalog) -> None:
    """A user deletes one file the workspace committed and edits another (``datahub
    commit``); the workspace changes neither and commits again: the user's changes are the
    only ones there are, and stand. Before, the workspace put both back at every commit. A
    file the workspace changes after that is put again (its change wins)."""
    from datahub.catalog import Delete
    from tests.writeback.test_merge17 import _import

    env = nodes["node-a"]
    ws = env.open()
    for key in ("removed-by-user", "edited-by-user", "log.txt"):
        write(ws, key, f"{key}, the workspace's".encode())
    commit_workspace(ws, catalog, DATASET)
    catalog.commit(DATASET, [Delete("removed-by-user")], message="a user's delete")
    _import(env, catalog, {"edited-by-user": b"the user's edit"})

    write(ws, "log.txt", b"log.txt, the workspace's, later")
    version = commit_workspace(ws, catalog, DATASET)
    assert (version.added, version.removed, version.modified) == (0, 0, 1)
    assert {r.key: r.checksum for r in catalog.list_records(DATASET)} == {
        "edited-by-user": _sha(b"the user's edit"),
        "log.txt": _sha(b"log.txt, the workspace's, later"),
    }
    write(ws, "removed-by-user", b"the workspace writes it again")
    commit_workspace(ws, catalog, DATASET)
    assert _sha(b"the workspace writes it again") == next(
        r.checksum for r in catalog.list_records(DATASET) if r.key == "removed-by-user"
    )


def test_a_node_back_with_its_old_copy_does_not_undo_what_the_workspace_committed_elsewhere(
    nodes, catalog
) -> None:
    """A CSI workspace's pod ran on node A, then on node B (a journal of its own), which
    committed a newer checkpoint; the pod comes back to node A, whose journal still holds the
    old one, unchanged since A committed it. A's commit adds its new file and leaves B's
    checkpoint: before, it put A's old checkpoint back over it."""
    a = nodes["node-a"].open()
    write(a, "ckpt", b"epoch 1, from node a")
    commit_workspace(a, catalog, DATASET)
    a.close()
    b = nodes["node-b"].open()
    write(b, "ckpt", b"epoch 2, from node b")
    commit_workspace(b, catalog, DATASET)
    b.close()

    a = nodes["node-a"].open()
    write(a, "log-a.txt", b"node a again")
    version = commit_workspace(a, catalog, DATASET)
    assert (version.added, version.removed, version.modified) == (1, 0, 0)
    assert {r.key: r.checksum for r in catalog.list_records(DATASET)} == {
        "ckpt": _sha(b"epoch 2, from node b"),
        "log-a.txt": _sha(b"node a again"),
    }


def test_two_datasets_and_a_derive_in_between_keep_their_bases_apart(nodes, catalog) -> None:
    """One workspace commits to two datasets (a base each: ``committed:<dataset>``); a user
    labels a file in one and derives that dataset onto itself (the labeled files only), then
    tags it. The workspace, unchanged, commits to it: the derive's deletes stand. It deletes
    the labeled file: the other dataset loses it, the labeled one keeps it."""
    ws = nodes["node-a"].open()
    write(ws, "a", b"a")
    write(ws, "b", b"b")
    commit_workspace(ws, catalog, DATASET)
    commit_workspace(ws, catalog, "other")
    catalog.commit(DATASET, [Patch("a", labels={"keep": True})], message="a user's label")
    catalog.derive(DATASET, None, "labels.keep=true", message="the labeled files only")
    catalog.tag(DATASET, "reviewed", None)

    assert commit_workspace(ws, catalog, DATASET).seq == 3  # unchanged: nothing to commit
    ws.unlink("a")
    commit_workspace(ws, catalog, DATASET)
    commit_workspace(ws, catalog, "other")
    assert sorted(r.key for r in catalog.list_records(DATASET)) == ["a"]
    assert sorted(r.key for r in catalog.list_records("other")) == ["b"]
