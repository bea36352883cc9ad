"""The directory table (SQLite ``sqlite_dirs``, MongoDB ``mongo_dirs``): listings of old
versions and of versions under deleted subtrees are right and read no rows of other versions'
subtrees (issue 38: an old version's root at 10^8 read 504 MB), commits keep the table, and
the backfill of a catalog made before it (``sqlite_dirs_backfill``, ``mongo_dirs_backfill``)
fills the same table, resumes, and starts over when a commit lands during it. The model test
runs on both stores; the Mongo store's own cases are in ``test_mongo_dirs.py``."""

from __future__ import annotations

import json
import shutil
import sqlite3
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datahub.catalog import Catalog, Delete, Put, mongo_dirs, sqlite_dirs
from datahub.catalog import store as store_module
from datahub.catalog.mongo_dirs_backfill import backfill as mongo_backfill
from datahub.catalog.sqlite_dirs_backfill import backfill
from datahub.catalog.sqlite_store import SQLiteCatalogStore
from tests.catalog.conftest import make_store, rec, sqlite_steps

# "a b/c", "a-b/d" and "a.b": names that sort between "a" and "a/" (space, "-" and "." come
# before "/"), where a seek past a subtree lands; "é/x": a name beyond ASCII
KEYS = [
    "a",
    "a/x",
    "a/y/z",
    "a/y/w",
    "a b/c",
    "a-b/d",
    "a.b",
    "b/c/d",
    "b/c/g/h",
    "b/e",
    "b0",
    "bb/f",
    "c",
    "é/x",
]
DIRECTORIES = ["", "a/", "a/y/", "a b/", "a-b/", "b/", "b/c/", "b/c/g/", "bb/", "é/"]


def model_level(keys: set[str], prefix: str) -> list[str]:
    """One directory level of a set of keys, as ``list_directory`` names its entries."""
    entries = set()
    for key in keys:
        if key.startswith(prefix):
            rest = key[len(prefix) :]
            entries.add(prefix + rest[: rest.index("/") + 1] if "/" in rest else key)
    return sorted(entries)


def names(entries) -> list[str]:
    return [e if isinstance(e, str) else e[0] for e in entries]


def dirs_rows(path: Path) -> list[tuple]:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT * FROM dirs ORDER BY dataset_id, parent, path, from_seq").fetchall()


def mongo_dirs_rows(store) -> list[tuple]:
    """The Mongo table as SQLite's rows (``seq``, the last commit that wrote a document, left out)."""
    docs = store.dirs.find({}, {"_id": 0, "seq": 0})
    return sorted((d["dataset"], d["parent"], d["path"], d["from_seq"], d["to_seq"], d["live"]) for d in docs)


def refill(kind: str, store, tmp: Path) -> None:
    """Drop the dataset's table and fill it again with the backfill, across checkpoints of 2 rows."""
    if kind == "sqlite":
        with sqlite3.connect(tmp / "catalog.db", isolation_level=None) as conn:
            conn.execute("UPDATE datasets SET dirs = 0")
            conn.execute("DELETE FROM dirs")
            assert backfill(conn, 1, "ds", checkpoint_rows=2)
    else:
        store.datasets.update_one({"_id": "ds"}, {"$set": {"dirs": False}})
        store.dirs.delete_many({})
        assert mongo_backfill(store, "ds", checkpoint_rows=2)
        assert store.datasets.find_one({"_id": "ds"})["dirs"] is True


@pytest.mark.parametrize("kind", ["sqlite", "mongomock"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)
@given(data=st.data())
def test_every_version_lists_as_the_model_and_the_backfill_fills_the_same_table(
    kind: str, data: st.DataObject
) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="catalog-dirs-"))
    pending, subdirectory_page = sqlite_dirs.PENDING_DIRECTORIES, store_module._SUBDIRECTORY_PAGE
    per_query = mongo_dirs.STATES_PER_QUERY
    # counts written (SQLite) or resolved into staged states (MongoDB) after every batch, or
    # once at the end of each commit
    sqlite_dirs.PENDING_DIRECTORIES = data.draw(st.sampled_from([1, 20_000]), label="pending")
    # MongoDB: a level's staged states read and replaced 1 at a time, or all at once
    mongo_dirs.STATES_PER_QUERY = data.draw(st.sampled_from([1, 1000]), label="states per query")
    # subdirectories read 1 or 2 at a time, or all at once
    store_module._SUBDIRECTORY_PAGE = data.draw(st.sampled_from([1, 2, 256]), label="subdirectory page")
    store = make_store(kind, tmp, batch_size=3, page_size=2)
    catalog = Catalog(store)
    try:
        catalog.create_dataset("ds")
        versions: list[set[str]] = [set()]
        for _ in range(data.draw(st.integers(1, 8), label="commits")):
            state, changes = set(versions[-1]), []
            for _ in range(data.draw(st.integers(1, 8))):
                key = data.draw(st.sampled_from(KEYS))
                if key in state and data.draw(st.booleans()):
                    changes.append(Delete(key))
                    state.discard(key)
                else:
                    changes.append(Put(rec(key, etag=data.draw(st.sampled_from(["e1", "e2"])))))
                    state.add(key)
            if state == versions[-1] and not any(isinstance(c, Put) for c in changes):
                continue
            catalog.commit("ds", changes)
            versions.append(state)

        def check_listings() -> None:
            for seq in range(1, len(versions)):
                for prefix in DIRECTORIES:
                    whole = names(catalog.list_directory("ds", seq, prefix=prefix))
                    assert whole == model_level(versions[seq], prefix), (seq, prefix)
                    paged, after = [], ""
                    while page := names(
                        catalog.list_directory("ds", seq, prefix=prefix, start_after=after, limit=2)
                    ):
                        paged, after = paged + page, page[-1]
                    assert paged == whole

        check_listings()
        rows = (
            (lambda: dirs_rows(tmp / "catalog.db")) if kind == "sqlite" else (lambda: mongo_dirs_rows(store))
        )
        kept = rows()
        # the backfill of the same records, across checkpoints of 2 rows, fills the same table
        refill(kind, store, tmp)
        assert rows() == kept
        check_listings()
    finally:
        sqlite_dirs.PENDING_DIRECTORIES, store_module._SUBDIRECTORY_PAGE = pending, subdirectory_page
        mongo_dirs.STATES_PER_QUERY = per_query
        catalog.close()
        shutil.rmtree(tmp, ignore_errors=True)


def _listing_steps(tmp_path: Path, others: int, *, deleted: bool) -> int:
    """VM steps (in 50s) of listing the root of a version beside ``others`` rows that are not
    live in it: added later under ``s100/`` (between the listed version's ``s10/`` and
    ``s11/``), or, when ``deleted``, added before and deleted by the listed version."""
    catalog = Catalog(SQLiteCatalogStore(tmp_path / f"{others}-{deleted}.db"))
    try:
        catalog.create_dataset("big")
        base = [Put(rec(k)) for k in ("a", "s10/x", "s11/x", "z")]
        subtree = [f"s100/{i:05d}" for i in range(others)]
        if deleted:
            catalog.commit("big", base + [Put(rec(k)) for k in subtree])
            listed = catalog.commit("big", [Delete(k) for k in subtree]).seq
        else:
            listed = catalog.commit("big", base).seq
            catalog.commit("big", [Put(rec(k)) for k in subtree])
        steps, level = sqlite_steps(catalog, lambda: names(catalog.list_directory("big", listed)))
        assert level == ["a", "s10/", "s11/", "z"]
        return steps
    finally:
        catalog.close()


@pytest.mark.parametrize("deleted", [False, True], ids=["later-subtree", "deleted-subtree"])
def test_a_listing_reads_no_rows_of_subtrees_not_live_in_its_version(tmp_path: Path, deleted: bool) -> None:
    # 100x the rows that are not live in the listed version: the listing reads as much as before
    # (before the directory table it stepped over every one of them: about 2 VM steps per 50 rows)
    few, many = (_listing_steps(tmp_path, n, deleted=deleted) for n in (40, 4000))
    assert many <= few + 2, (few, many)


def _legacy(path: Path) -> None:
    """Make ``path`` a catalog as schema version 3 left it: no directory table at all."""
    with sqlite3.connect(path, isolation_level=None) as conn:
        conn.execute("DROP TABLE dirs")
        conn.execute("DROP TABLE dirs_backfill")
        conn.execute("ALTER TABLE datasets DROP COLUMN dirs")
        conn.execute("PRAGMA user_version = 3")


def _made(path: Path) -> list[set[str]]:
    """A dataset of three versions over a few directories; each version's keys."""
    catalog = Catalog(SQLiteCatalogStore(path))
    catalog.create_dataset("ds")
    v1 = {f"d{i}/f{j}" for i in range(6) for j in range(5)} | {"top", "d2/sub/x"}
    catalog.commit("ds", [Put(rec(k)) for k in sorted(v1)])
    catalog.commit("ds", [Delete(k) for k in sorted(v1) if k.startswith("d3/")] + [Put(rec("d30/new"))])
    catalog.commit("ds", [Put(rec("d3/back")), Delete("d2/sub/x")])
    catalog.close()
    v2 = {k for k in v1 if not k.startswith("d3/")} | {"d30/new"}
    return [set(), v1, v2, (v2 | {"d3/back"}) - {"d2/sub/x"}]


def _check(path: Path, versions: list[set[str]]) -> None:
    catalog = Catalog(SQLiteCatalogStore(path))
    try:
        for seq in range(1, len(versions)):
            for prefix in ("", "d2/", "d3/", "d2/sub/"):
                assert names(catalog.list_directory("ds", seq, prefix=prefix)) == model_level(
                    versions[seq], prefix
                )
    finally:
        catalog.close()


class Killed(Exception):
    pass


def test_the_backfill_of_an_old_catalog_resumes_and_fills_what_commits_keep(tmp_path: Path) -> None:
    kept, old = tmp_path / "kept.db", tmp_path / "old.db"
    versions = _made(kept)
    _made(old)
    _legacy(old)
    _check(old, versions)  # opened by this datahub: upgraded, listed the old way
    with sqlite3.connect(old) as conn:
        assert conn.execute("SELECT dirs FROM datasets").fetchall() == [(0,)]
        assert conn.execute("SELECT count(*) FROM dirs").fetchone() == (0,)
    seen: list[tuple[int, int]] = []

    def killed_at_the_third(dataset: str, done: int, total: int) -> None:
        seen.append((done, total))
        if len(seen) == 3:
            raise Killed

    with sqlite3.connect(old, isolation_level=None) as conn, pytest.raises(Killed):
        backfill(conn, 1, "ds", progress=killed_at_the_third, checkpoint_rows=5)
    with sqlite3.connect(old) as conn:  # halfway: rows stored, the dataset still lists the old way
        assert conn.execute("SELECT dirs FROM datasets").fetchall() == [(0,)]
        assert conn.execute("SELECT rows_done FROM dirs_backfill").fetchone()[0] == seen[-1][0]
    _check(old, versions)
    resumed: list[tuple[int, int]] = []
    with sqlite3.connect(old, isolation_level=None) as conn:
        assert backfill(
            conn, 1, "ds", progress=lambda d, done, total: resumed.append((done, total)), checkpoint_rows=5
        )
    assert resumed[0][0] == seen[-1][0] > 0  # went on from the checkpoint, not from the start
    assert resumed[-1][0] == resumed[-1][1] == 34  # every revision once (the estimate is exact here)
    assert dirs_rows(old) == dirs_rows(kept)
    with sqlite3.connect(old) as conn:
        assert conn.execute("SELECT dirs FROM datasets").fetchall() == [(1,)]
        assert conn.execute("SELECT count(*) FROM dirs_backfill").fetchone() == (0,)
    _check(old, versions)


def test_a_commit_during_the_backfill_makes_it_start_over(tmp_path: Path) -> None:
    kept, old = tmp_path / "kept.db", tmp_path / "old.db"
    versions = _made(kept)
    _made(old)
    _legacy(old)
    calls = []

    def killed(dataset: str, done: int, total: int) -> None:
        calls.append(done)
        if len(calls) == 2:  # at the first checkpoint
            raise Killed

    with sqlite3.connect(old, isolation_level=None) as conn, pytest.raises(Killed):
        SQLiteCatalogStore(old).close()  # the upgrade
        backfill(conn, 1, "ds", progress=killed, checkpoint_rows=5)
    for path in (kept, old):  # a commit lands on both while the backfill is stopped
        catalog = Catalog(SQLiteCatalogStore(path))
        catalog.commit("ds", [Put(rec("d0/late")), Delete("top")])
        catalog.close()
    versions.append((versions[-1] | {"d0/late"}) - {"top"})
    store = SQLiteCatalogStore(old)
    progress: list[int] = []
    assert store.fill_directory_tables(progress=lambda d, done, total: progress.append(done)) == ["ds"]
    store.close()
    assert calls == [0, 5] and progress == [0, 35]  # over again from the start: one pass of every row
    assert dirs_rows(old) == dirs_rows(kept)
    _check(old, versions)


def test_a_catalog_set_back_by_an_older_datahub_lists_the_old_way_again(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    versions = _made(path)
    with sqlite3.connect(path, isolation_level=None) as conn:
        conn.execute("PRAGMA user_version = 3")  # what an older datahub's open writes
    _check(path, versions)
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT dirs FROM datasets").fetchall() == [(0,)]
        assert conn.execute("SELECT count(*) FROM dirs").fetchone() == (0,)


def test_datahub_migrate_fills_the_tables_of_an_old_catalog(tmp_path: Path, capsys, monkeypatch) -> None:
    from datahub.cli.main import main

    monkeypatch.delenv("DATAHUB_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    home = tmp_path / "var"
    home.mkdir()
    versions = _made(home / "catalog.db")
    _legacy(home / "catalog.db")
    assert main(["--home", str(home), "migrate"]) == 0  # as docs/catalog.md shows it
    out, err = capsys.readouterr()
    assert "directory tables filled: ds" in out and "migrate ds: directory table, records: 34/34" in err
    with sqlite3.connect(home / "catalog.db") as conn:
        assert conn.execute("SELECT dirs FROM datasets").fetchall() == [(1,)]
    _check(home / "catalog.db", versions)
    assert main(["--home", str(home), "--json", "migrate"]) == 0  # again: nothing left to fill
    assert json.loads(capsys.readouterr().out) == {"filled": []}


def test_a_table_that_does_not_fit_its_records_is_given_up_not_trusted(tmp_path: Path, caplog) -> None:
    # counts edited by hand (or left wrong by a defect): the commit still succeeds, the dataset
    # lists without the table, and `datahub migrate` fills it again
    path = tmp_path / "c.db"
    versions = _made(path)
    with sqlite3.connect(path, isolation_level=None) as conn:
        conn.execute("UPDATE dirs SET live = 1 WHERE path = 'd0/' AND to_seq > 3")
    catalog = Catalog(SQLiteCatalogStore(path))
    catalog.commit("ds", [Delete(f"d0/f{j}") for j in range(5)])
    catalog.close()
    versions.append({k for k in versions[-1] if not k.startswith("d0/")})
    assert "does not match its records" in caplog.text
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT dirs FROM datasets").fetchall() == [(0,)]
        assert conn.execute("SELECT count(*) FROM dirs").fetchone() == (0,)
    _check(path, versions)
    store = SQLiteCatalogStore(path)
    assert store.fill_directory_tables() == ["ds"]
    store.close()
    _check(path, versions)


def test_count_parents_counts_a_sorted_batch_of_one_directory_whole_and_any_other_key_by_key() -> None:
    from collections import Counter

    from datahub.catalog.sqlite_dirs import count_parents

    cases = [
        (["d/a", "d/b", "d/c"], True),  # one directory, ascending: the fast path
        (["d/a", "d/b/x", "d/c"], True),  # a deeper key between: key by key
        (["d/a", "e/b", "d/c"], False),  # not ascending: key by key
        (["a", "b/c", "b/d/e"], True),  # the root counts in no directory
    ]
    for keys, ascending in cases:
        counted: Counter[str] = Counter()
        count_parents(keys, -1, counted, ascending=ascending)
        expected = Counter(k[: k.rfind("/") + 1] for k in keys if "/" in k)
        assert counted == Counter({p: -n for p, n in expected.items()}), keys


def _level_statements(tmp_path: Path, gone: int) -> int:
    """SQLite statements listing the root of a version that keeps 3 of the ``3 + gone``
    subdirectories its dataset ever had, and 2 files among them."""
    catalog = Catalog(SQLiteCatalogStore(tmp_path / f"gone-{gone}.db"))
    try:
        catalog.create_dataset("ds")
        subdirectories = [f"s{i:04d}/" for i in range(3 + gone)]
        kept = subdirectories[:: max(1, len(subdirectories) // 3)][:3]
        catalog.commit("ds", [Put(rec(k)) for k in ["a", "zz"] + [d + "x" for d in subdirectories]])
        listed = catalog.commit("ds", [Delete(d + "x") for d in subdirectories if d not in kept]).seq
        statements: list[str] = []
        with catalog.store._conn() as conn:
            conn.set_trace_callback(statements.append)
            try:
                level = names(catalog.list_directory("ds", listed))
            finally:
                conn.set_trace_callback(None)
        assert level == ["a", *kept, "zz"]
        return len(statements)
    finally:
        catalog.close()


def test_a_level_costs_the_same_statements_however_many_of_its_subdirectories_are_gone(
    tmp_path: Path,
) -> None:
    # one read of the subdirectories and one of the files between them, as on MongoDB
    # (test_mongo_dirs); before, one statement per subdirectory the level ever had
    few, many = (_level_statements(tmp_path, gone) for gone in (1, 200))
    assert few == many, (few, many)
