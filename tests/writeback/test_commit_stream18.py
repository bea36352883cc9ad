"""commitmem18 (issue 38): a workspace commit streams, a batch of keys at a time.

Before, ``commit_workspace`` held the workspace's flushed objects, the head's records, the
journal's merge base (one JSON value) and the change set at once: 1.1 GB of heap at 10^6
files. Now it walks the three side by side in key order (``datahub.commit_base``), pins and
records a batch at a time, and the base is one journal entry per key. These tests shrink the
batch to a few keys so that every step crosses batches, and check the three-way rules of
docs/writeback.md ("A commit applies the workspace's changes") across them. Real stores:
local object stores, an SQLite catalog file, real journals.
"""

from __future__ import annotations

import pytest

import datahub.workspaces as workspaces
from datahub import commit_base
from datahub.catalog import Delete, Patch
from datahub.errors import StorageError
from datahub.workspaces import commit_workspace
from tests.writeback.conftest import write
from tests.writeback.test_merge17 import DATASET, _head, _import, _sha, catalog, nodes  # noqa: F401

BATCH = 4


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Batches of BATCH keys, and the number of files each pin of the commit was handed."""
    monkeypatch.setattr(commit_base, "BATCH", BATCH)
    pinned: list[int] = []
    pin = workspaces._pin_blobs

    def counting(workspace, objects, known, *etags):  # etags: what the commit's batches learned
        pinned.append(len(objects))
        return pin(workspace, objects, known, *etags)

    monkeypatch.setattr(workspaces, "_pin_blobs", counting)
    return pinned


def _base(ws) -> dict[str, list[str]]:
    """The journal's merge base as stored: one meta entry per key."""
    with ws.journal.read() as txn:
        assert txn.meta(f"committed:{DATASET}") is None  # no longer one value for the dataset
        return {n.partition("\0")[2]: v.split(",") for n, v in txn.metas(f"committed:{DATASET}\0")}


def test_the_three_way_rules_hold_across_batches(nodes, catalog, small_batches: list[int]) -> None:  # noqa: F811
    """30 files of the workspace between others' files, in batches of 4 keys: each pin gets
    at most 4 files, the base is an entry per file, and the second commit deletes only what
    the workspace removed, puts only what it changed, and keeps a user's edit of a file the
    workspace left unchanged and everything imported."""
    env = nodes["node-a"]
    mine = {f"k{i:02d}": f"mine {i}".encode() for i in range(30)}
    theirs = {f"k{i:02d}x": f"theirs {i}".encode() for i in range(0, 30, 3)}
    _import(env, catalog, theirs)
    ws = env.open()
    for key, data in mine.items():
        write(ws, key, data)
    v2 = commit_workspace(ws, catalog, DATASET)
    assert (v2.seq, v2.added, v2.removed) == (2, 30, 0)
    assert max(small_batches) <= BATCH and sum(small_batches) == 30
    assert _head(catalog) == {k: _sha(d) for k, d in {**theirs, **mine}.items()}
    base = _base(ws)
    assert sorted(base) == sorted(mine) and all(len(i) == 1 and len(i[0]) == 32 for i in base.values())

    catalog.commit(DATASET, [Patch("k05", meta={"reviewed": True})], message="a user labels k05")
    catalog.commit(DATASET, [Delete("k06")], message="a user deletes k06")
    for key in ("k01", "k05", "k13", "k29"):
        ws.unlink(key)
    for key in ("k02", "k17"):
        write(ws, key, b"rewritten " + key.encode())
    write(ws, "k30", b"new")
    small_batches.clear()
    v5 = commit_workspace(ws, catalog, DATASET)
    assert (v5.added, v5.removed, v5.modified) == (1, 3, 2)  # k05 was labeled: the user's now
    expected = {k: _sha(d) for k, d in {**theirs, **mine}.items() if k not in ("k01", "k06", "k13", "k29")}
    expected |= {"k02": _sha(b"rewritten k02"), "k17": _sha(b"rewritten k17"), "k30": _sha(b"new")}
    assert _head(catalog) == expected
    assert max(small_batches) <= BATCH
    assert sorted(_base(ws)) == sorted(set(mine) - {"k01", "k05", "k13", "k29"} | {"k30"})
    assert commit_workspace(ws, catalog, DATASET).seq == v5.seq  # nothing left to commit


def test_a_failed_catalog_commit_leaves_each_key_unioned_across_batches(
    nodes,  # noqa: F811
    catalog,  # noqa: F811
    small_batches: list[int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``expect`` writes a batch at a time: after a refused commit every changed key holds
    both records (UNSETTLED first for a new one), so the next commit deletes a removed file
    whichever record the head has."""
    from datahub.catalog import Catalog
    from datahub.errors import CatalogUnavailable

    env = nodes["node-a"]
    ws = env.open()
    for i in range(10):
        write(ws, f"f{i}", f"v1 {i}".encode())
    commit_workspace(ws, catalog, DATASET)
    for i in range(0, 10, 2):
        write(ws, f"f{i}", f"v2 {i}".encode())
    write(ws, "g", b"new")

    def down(*args, **kwargs):
        raise CatalogUnavailable("the catalog is down (injected)")

    with monkeypatch.context() as patched:
        patched.setattr(Catalog, "commit", down)
        with pytest.raises(CatalogUnavailable):
            commit_workspace(ws, catalog, DATASET)
    base = _base(ws)
    assert all(len(base[f"f{i}"]) == 2 for i in range(0, 10, 2))
    assert all(len(base[f"f{i}"]) == 1 for i in range(1, 10, 2))
    assert base["g"][0] == commit_base.UNSETTLED and len(base["g"]) == 2
    for i in range(0, 10, 3):
        ws.unlink(f"f{i}")
    version = commit_workspace(ws, catalog, DATASET)
    assert (version.added, version.removed, version.modified) == (1, 4, 3)
    assert sorted(_head(catalog)) == sorted({f"f{i}" for i in range(10) if i % 3} | {"g"})
    assert all(len(idents) == 1 for idents in _base(ws).values())


def test_a_key_too_long_for_a_journal_name_is_kept_and_deleted_like_any(nodes, catalog) -> None:  # noqa: F811
    """A path near the journal's own limit, with the dataset's name in front, is longer than an
    LMDB key may be: its base entry is named by its digest, and the next commit still deletes
    the file the workspace removed."""
    env = nodes["node-a"]
    ws = env.open()
    deep, name = "d" * 250, "f" * 250  # 501 bytes: under the journal's 511, not with the prefix
    ws.mkdir(deep)
    write(ws, f"{deep}/{name}", b"long")
    write(ws, "short", b"short")
    commit_workspace(ws, catalog, DATASET)
    with ws.journal.read() as txn:
        longs = list(txn.metas(f"committed:{DATASET}\1"))
    assert [v.partition("\0")[0] for _, v in longs] == [f"{deep}/{name}"]
    assert sorted(_base(ws)) == ["short"]
    ws.unlink(f"{deep}/{name}")
    version = commit_workspace(ws, catalog, DATASET)
    assert (version.removed, sorted(_head(catalog))) == (1, ["short"])
    with ws.journal.read() as txn:
        assert list(txn.metas(f"committed:{DATASET}\1")) == []


def test_a_stream_out_of_key_order_stops_the_walk() -> None:
    """A catalog store listing in another order than Python's would have the walk take a head
    file for missing: it raises instead, before anything is committed."""
    walked = commit_base.joined([("a", 1), ("c", 3)], [("b", 2), ("a", 1)])
    with pytest.raises(StorageError, match="out of order"):
        list(walked)
    assert list(commit_base.joined([("a", 1), ("c", 3)], [("b", 2)])) == [
        ("a", [1, None]),
        ("b", [None, 2]),
        ("c", [3, None]),
    ]


def test_the_spill_gives_back_its_rows_as_written_as_often_as_read() -> None:
    """The spill keeps what the catalog is handed later exactly (records with meta too)."""
    from datahub.catalog import Record

    record = Record("k", "file:///x", "e", 3, checksum="sha256:00", meta={"a": [1, 2]})
    with commit_base.Spill() as spill:
        spill.add(("k", "id", "+", record))
        spill.add(("l", None, "-", None))
        assert list(spill.rows()) == list(spill.rows()) == [("k", "id", "+", record), ("l", None, "-", None)]


def test_a_migration_cut_short_by_a_crash_migrates_again(nodes, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """An old journal's base (one JSON value) goes into entries a batch per transaction and
    the old value goes last: a kill in between leaves both, and the next open migrates from
    the start again, to the same entries."""
    import json

    monkeypatch.setattr(commit_base, "BATCH", BATCH)
    ws = nodes["node-a"].open()
    old = {f"k{i}": [f"{i:032x}"] for i in range(10)} | {"u": ["", "a" * 32, "b" * 32]}
    with ws.journal.write("an old journal's base") as txn:
        txn.put_meta(f"committed:{DATASET}", json.dumps(old))
    write_batch = commit_base.Base._write
    calls = []

    def dies_on_the_second(self, entries, drop_old=False):
        calls.append(len(entries))
        if len(calls) == 2:
            raise SystemExit("killed")
        write_batch(self, entries, drop_old)

    monkeypatch.setattr(commit_base.Base, "_write", dies_on_the_second)
    with pytest.raises(SystemExit):
        commit_base.Base(ws, DATASET)
    with ws.journal.read() as txn:
        assert txn.meta(f"committed:{DATASET}") is not None  # still there: migrated again below
        assert len(list(txn.metas(f"committed:{DATASET}\0"))) == BATCH
    monkeypatch.setattr(commit_base.Base, "_write", write_batch)
    assert dict(commit_base.Base(ws, DATASET).scan()) == old
    assert _base(ws) == old
