"""SQLite-specific promises: readers keep working during a commit; a second writer waits or
gets a clear conflict; the catalog survives reopening."""

from __future__ import annotations

import dataclasses
import itertools
import threading
from pathlib import Path

import pytest

from datahub.catalog import Catalog, Delete, Patch, Put
from datahub.catalog.revisions import OPEN
from datahub.catalog.sqlite_store import SQLiteCatalogStore
from datahub.errors import Busy, RecordNotFound
from tests.catalog.conftest import rec

WAIT = 60  # generous upper bound for an event; the test never sleeps for synchronisation


def test_readers_keep_working_during_a_big_commit(tmp_path: Path) -> None:
    store = SQLiteCatalogStore(tmp_path / "c.db", batch_size=100)
    cat = Catalog(store)
    cat.create_dataset("ds")
    cat.commit("ds", (Put(rec(f"a/{i:05d}")) for i in range(1000)))
    midway, release = threading.Event(), threading.Event()
    outcome: dict[str, object] = {}

    def big_change_set():
        for i in range(3000):
            if i == 1500:  # 15 batches are written inside the open transaction
                midway.set()
                assert release.wait(WAIT)
            yield Put(rec(f"b/{i:05d}"))

    def writer() -> None:
        try:
            outcome["version"] = cat.commit("ds", big_change_set(), message="big")
        except BaseException as exc:  # reported to the main thread
            outcome["error"] = exc

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert midway.wait(WAIT)
        # Another thread (its own connection) reads while the commit's transaction is open.
        assert sum(1 for _ in cat.list_records("ds", 1)) == 1000
        assert cat.resolve("ds").seq == 1
        assert cat.get_record("ds", 1, "a/00999").key == "a/00999"
        # A second writer that may wait only briefly gets a clear busy error (503, retry later:
        # not a conflict its caller caused, issue 24 item 3), not a hang.
        impatient = Catalog(SQLiteCatalogStore(tmp_path / "c.db", busy_timeout_ms=50, commit_wait_s=0.05))
        with pytest.raises(Busy, match="busy"):
            impatient.commit("ds", [Put(rec("x"))])
        impatient.close()
    finally:
        release.set()
        thread.join(WAIT)
    assert "error" not in outcome, outcome
    assert outcome["version"].record_count == 4000  # type: ignore[union-attr]
    assert sum(1 for _ in cat.list_records("ds")) == 4000
    cat.close()


def test_reopen_keeps_everything(tmp_path: Path) -> None:
    with Catalog(SQLiteCatalogStore(tmp_path / "c.db")) as cat:
        cat.create_dataset("ds")
        cat.commit("ds", [Put(rec("a"))], message="m")
        cat.tag("ds", "golden", 1)
    with Catalog(SQLiteCatalogStore(tmp_path / "c.db")) as cat:
        assert cat.resolve("ds", "golden").message == "m"
        assert [r.key for r in cat.list_records("ds")] == ["a"]


def test_file_in_wal_mode(tmp_path: Path) -> None:
    store = SQLiteCatalogStore(tmp_path / "c.db")
    with store._conn() as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    store.close()


def test_commit_writes_rows_in_proportion_to_changes(tmp_path: Path) -> None:
    """O(changes): a 2-change commit on 2,000 records adds one revision and closes two."""
    store = SQLiteCatalogStore(tmp_path / "c.db")
    cat = Catalog(store)
    cat.create_dataset("ds")
    cat.commit("ds", (Put(rec(f"k{i:05d}")) for i in range(2000)))
    cat.commit("ds", [Put(rec("k00007", etag="new")), Delete("k01234")])
    with store._conn() as conn:
        rows = conn.execute("SELECT from_seq, to_seq, COUNT(*) FROM records GROUP BY 1, 2").fetchall()
    assert sorted(rows) == [(1, 2, 2), (1, OPEN, 1998), (2, OPEN, 1)]
    cat.close()


def test_a_version_1_catalog_gains_commit_digests_and_keeps_its_commit_ids(tmp_path: Path) -> None:
    """A catalog written before change-set digests opens, keeps answering its old commit ids
    (they have no digest, so any retry of them returns their version) and fences new ones."""
    import sqlite3

    from datahub.errors import CommitIdReused

    path = tmp_path / "c.db"
    with Catalog(SQLiteCatalogStore(path)) as cat:
        cat.create_dataset("ds")
        cat.commit("ds", [Put(rec("a"))], commit_id="old")
    conn = sqlite3.connect(path)  # turn it back into a version-1 file
    conn.execute("ALTER TABLE versions DROP COLUMN commit_digest")
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    with Catalog(SQLiteCatalogStore(path)) as cat:
        assert cat.commit("ds", [Put(rec("other"))], commit_id="old").seq == 1
        assert cat.commit("ds", [Put(rec("b"))], commit_id="new").seq == 2
        with pytest.raises(CommitIdReused, match="'new'"):
            cat.commit("ds", [Put(rec("c"))], commit_id="new")
        assert [v.seq for v in cat.log("ds")] == [2, 1]


def test_a_version_2_catalog_gains_dataset_revisions(tmp_path: Path) -> None:
    """A catalog written before dataset revisions opens with every dataset at revision 0."""
    import sqlite3

    from datahub.errors import PreconditionFailed

    path = tmp_path / "c.db"
    with Catalog(SQLiteCatalogStore(path)) as cat:
        cat.create_dataset("ds", description="d", acl={"bob": "admin"})
    conn = sqlite3.connect(path)  # turn it back into a version-2 file
    conn.execute("ALTER TABLE datasets DROP COLUMN revision")
    conn.execute("PRAGMA user_version = 2")
    conn.commit()
    conn.close()
    with Catalog(SQLiteCatalogStore(path)) as cat:
        assert cat.get_dataset("ds").revision == 0
        assert cat.update_dataset("ds", expected_revision=0, acl={}).revision == 1
        with pytest.raises(PreconditionFailed):
            cat.update_dataset("ds", expected_revision=0, description="stale")
        assert cat.get_dataset("ds").description == "d"


N = 4  # the batch size of the boundary tests below


def _rows(store: SQLiteCatalogStore) -> list[tuple]:
    with store._conn() as conn:
        return conn.execute("SELECT key, from_seq, to_seq, etag FROM records ORDER BY 1, 2").fetchall()


@pytest.mark.parametrize("n", [N - 1, N, N + 1, 2 * N, 2 * N + 1])
def test_batches_of_n_write_exactly_the_change_set(tmp_path: Path, n: int) -> None:
    """Batch boundaries change nothing: a change in batch k sees every change of batches < k."""
    store = SQLiteCatalogStore(tmp_path / "c.db", batch_size=N)
    cat = Catalog(store)
    cat.create_dataset("ds")
    v1 = cat.commit("ds", (Put(rec(f"k{i}")) for i in range(n)))
    assert v1.record_count == n
    # the last change of the set touches the first key: a put, then a patch of it, possibly batches apart
    changes = [Put(rec("k0", etag="second"))] + [Put(rec(f"new{i}")) for i in range(n - 1)]
    changes.append(Patch("k0", meta={"seen": True}))
    v2 = cat.commit("ds", changes)
    assert (v2.record_count, v2.added, v2.modified, v2.removed) == (2 * n - 1, n - 1, 1, 0)
    k0 = cat.get_record("ds", 2, "k0")
    assert k0.etag == "second" and k0.meta["seen"] is True
    assert cat.get_record("ds", 1, "k0").etag == rec("k0").etag
    cat.close()


@pytest.mark.parametrize("bad_at", [N, N + 1, 2 * N + 1])
def test_a_failing_change_in_a_later_batch_leaves_nothing(tmp_path: Path, bad_at: int) -> None:
    """The change at position ``bad_at`` (1-based) fails after whole batches were written in the
    transaction: no version, and not one row differs from before."""
    store = SQLiteCatalogStore(tmp_path / "c.db", batch_size=N)
    cat = Catalog(store)
    cat.create_dataset("ds")
    cat.commit("ds", [Put(rec("a")), Put(rec("b"))])
    before = _rows(store)
    changes = [Delete("a"), *(Put(rec(f"n{i}")) for i in range(bad_at - 2)), Delete("missing")]
    assert len(changes) == bad_at
    with pytest.raises(RecordNotFound, match="missing"):
        cat.commit("ds", changes)
    assert store.head("ds") == 1 and _rows(store) == before
    cat.close()


def test_records_decoded_for_listings_are_the_records_that_were_committed(tmp_path: Path) -> None:
    """Listings build Records without the dataclass __init__ (record_from_row): equal, frozen
    and replaceable like any other."""
    store = SQLiteCatalogStore(tmp_path / "c.db", page_size=3)
    cat = Catalog(store)
    cat.create_dataset("ds")
    committed = [
        rec(
            f"k{i}",
            size=i,
            checksum="sha256:00" if i % 2 else "",
            meta={"i": i} if i % 3 else {},
            labels={"c": "x"},
        )
        for i in range(8)
    ]
    cat.commit("ds", [Put(r) for r in committed])
    listed = list(cat.list_records("ds", 1))
    assert listed == committed
    with pytest.raises(dataclasses.FrozenInstanceError):
        listed[0].key = "other"  # type: ignore[misc]
    assert dataclasses.replace(listed[1], size=99) == dataclasses.replace(committed[1], size=99)
    cat.close()


def test_a_diff_read_in_growing_pages_is_the_whole_diff_in_key_order(tmp_path: Path) -> None:
    """Diff streams read small first pages that grow (a 50-entry API page no longer reads
    4,096 rows per stream); across many page boundaries the diff is exactly the listings'."""
    cat = Catalog(SQLiteCatalogStore(tmp_path / "c.db"))
    cat.create_dataset("ds")
    cat.commit("ds", (Put(rec(f"k{i:05d}")) for i in range(6000)))
    changes = [Put(rec(f"k{i:05d}", etag="e2")) for i in range(0, 6000, 3)]
    changes += [Delete(f"k{i:05d}") for i in range(1, 6000, 7) if i % 3]
    changes += [Put(rec(f"n{i:05d}")) for i in range(700)]
    cat.commit("ds", changes)
    cat.commit("ds", [Put(rec(f"k{i:05d}", etag="e3")) for i in range(0, 6000, 5)])
    for a, b in ((1, 2), (2, 1), (1, 3), (0, 3)):
        before = {r.key: r for r in cat.list_records("ds", a)} if a else {}
        after = {r.key: r for r in cat.list_records("ds", b)}
        want = sorted(
            [("removed", k) for k in before.keys() - after.keys()]
            + [("added", k) for k in after.keys() - before.keys()]
            + [("modified", k) for k in before.keys() & after.keys() if before[k] != after[k]],
            key=lambda e: e[1],
        )
        got = [(e.kind, e.key) for e in cat.diff("ds", a, b)]
        assert got == want, (a, b)
        assert [(e.kind, e.key) for e in itertools.islice(cat.diff("ds", a, b), 50)] == want[:50]
    cat.close()
