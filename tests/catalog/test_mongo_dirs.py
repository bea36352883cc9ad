"""The MongoDB directory table (``mongo_dirs``, ``mongo_dirs_backfill``), on mongomock (and on a
real server when DATAHUB_TEST_MONGO_URI is set): a commit that crashes at any step of its
protocol, a roll-forward run again or by two processes, or a late one of an older commit,
leaves exactly the table a clean run leaves; an old dataset's backfill resumes, starts over
after a commit, and is used only once whole; and a listing of an old version reads no
documents of later subtrees."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from datahub.catalog import Catalog, Delete, Put, sqlite_dirs
from datahub.catalog.mongo_dirs_backfill import backfill
from datahub.catalog.mongo_store import MongoCatalogStore
from datahub.catalog.revisions import OPEN
from tests.catalog.conftest import mongo_url, rec
from tests.catalog.test_directory_table import model_level, mongo_dirs_rows, names
from tests.catalog.test_mongo_commit_protocol import Clock, SimulatedCrash, crash_at

NO_SERVER = "needs a real MongoDB: set DATAHUB_TEST_MONGO_URI"
KINDS = [
    "mongomock",
    pytest.param(
        "mongo", marks=pytest.mark.skipif(not os.environ.get("DATAHUB_TEST_MONGO_URI"), reason=NO_SERVER)
    ),
]
TINY = {"batch_size": 3, "page_size": 2}


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def stores(kind: str) -> Iterator[Callable[..., MongoCatalogStore]]:
    """Make stores on one fresh database (one client: mongomock's data is per client)."""
    url, made = mongo_url(kind), []
    clock = Clock()

    def make(**options: Any) -> MongoCatalogStore:
        client = made[0].client if made else None
        lease = 60.0 if kind == "mongomock" else 2.0
        store = MongoCatalogStore(url, client=client, clock=clock, lease_seconds=lease, **(TINY | options))
        made.append(store)
        return store

    make.clock = clock  # type: ignore[attr-defined]
    try:
        yield make
    finally:
        if kind == "mongo":
            made[0].drop()
        for store in reversed(made):
            store.close()


# Commits over a few nested directories: v2 empties d3/ and d2/sub/, opens d30/ and e/f/;
# v3 brings d3/ back (a second interval), empties e/f/ and with it e/, and adds to d2/ (whose
# count v2 changed too).
V1 = sorted({f"d{i}/f{j}" for i in range(5) for j in range(4)} | {"top", "d2/sub/x", "d2/sub/y"})
COMMITS: list[list] = [
    [Put(rec(k)) for k in V1],
    [Delete(k) for k in V1 if k.startswith(("d3/", "d2/sub/"))]
    + [Put(rec("d30/new")), Put(rec("e/f/g")), Put(rec("d0/f0", etag="e2"))],
    [Put(rec("d3/back")), Delete("e/f/g"), Delete("top"), Put(rec("d1/f9")), Put(rec("d2/f9"))],
]
PREFIXES = ["", "d0/", "d2/", "d2/sub/", "d3/", "e/", "e/f/"]


def versions() -> list[set[str]]:
    states = [set()]
    for changes in COMMITS:
        state = set(states[-1])
        for change in changes:
            (state.add if isinstance(change, Put) else state.discard)(
                change.record.key if isinstance(change, Put) else change.key
            )
        states.append(state)
    return states


def committed(store: MongoCatalogStore, count: int = len(COMMITS)) -> Catalog:
    """The dataset ``ds`` with the first ``count`` commits, on ``store``."""
    catalog = Catalog(store)
    catalog.create_dataset("ds")
    for changes in COMMITS[:count]:
        catalog.commit("ds", changes)
    return catalog


def check(store: MongoCatalogStore) -> None:
    catalog = Catalog(store)
    for seq, keys in enumerate(versions()[1:], 1):
        for prefix in PREFIXES:
            assert names(catalog.list_directory("ds", seq, prefix=prefix)) == model_level(keys, prefix), (
                seq,
                prefix,
            )


def clean_table() -> list[tuple]:
    """The table the three commits leave without a fault (in a database of its own)."""
    store = MongoCatalogStore(mongo_url("mongomock"), **TINY)
    try:
        catalog = Catalog(store)
        catalog.create_dataset("ds")
        for changes in COMMITS:
            catalog.commit("ds", changes)
        return mongo_dirs_rows(store)
    finally:
        store.close()


# every fault point of the protocol, at its first call and (points called per batch or per
# page) at its second
STEPS = ["renewed", "batch-written", "dirs-staged", "publishing", "records-rolled", "dirs-rolled"]
CRASHES = [(point, 1) for point in STEPS] + [(point, 2) for point in STEPS if point != "publishing"]


@pytest.mark.parametrize(("point", "after"), CRASHES)
def test_a_commit_crashed_at_any_step_then_finished_or_redone_leaves_the_same_table(
    stores, point: str, after: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_dirs, "PENDING_DIRECTORIES", 1)  # states staged after every batch
    expected = clean_table()
    store = stores()
    catalog = Catalog(store)
    catalog.create_dataset("ds")
    catalog.commit("ds", COMMITS[0])
    crashing = Catalog(stores(fault=crash_at(point, after)))
    with pytest.raises(SimulatedCrash):
        crashing.commit("ds", COMMITS[1], commit_id="c2")
    decided = store.commits.find_one({"_id": "ds@2"})["state"] == "publishing"
    assert decided == (point in ("publishing", "records-rolled", "dirs-rolled"))
    if decided:  # another process rolls the same claim forward, twice, before anyone finishes it
        epoch = store.commits.find_one({"_id": "ds@2"})["epoch"]
        stores()._roll_forward("ds", 2, epoch)
        stores()._roll_forward("ds", 2, epoch)
    else:  # the dead writer's lease runs out (on mongomock's stand-in clock, or the server's)
        stores.clock.now += 61  # type: ignore[attr-defined]
        if store._server_time:
            time.sleep(store.lease_seconds + 0.5)
    assert catalog.commit("ds", COMMITS[1], commit_id="c2").seq == 2  # finished, or taken over and redone
    catalog.commit("ds", COMMITS[2])
    assert mongo_dirs_rows(store) == expected
    assert store.staged_dirs.count_documents({}) == 0
    check(store)


def test_a_late_roll_forward_of_an_older_commit_sets_nothing_back(stores, monkeypatch) -> None:
    """A process that read a page of v2's staged states and stalled writes them after v3 was
    published: every write is filtered on the document's ``seq``, so v3's states stay."""
    monkeypatch.setattr(sqlite_dirs, "PENDING_DIRECTORIES", 1)
    expected = clean_table()
    store = stores()
    catalog = Catalog(store)
    catalog.create_dataset("ds")
    catalog.commit("ds", COMMITS[0])
    with pytest.raises(SimulatedCrash):
        Catalog(stores(fault=crash_at("publishing", 1))).commit("ds", COMMITS[1])
    claim = store.commits.find_one({"_id": "ds@2"})
    stalled = list(store.staged_dirs.find({"dataset": "ds", "seq": 2}, {"_id": 0}))
    assert stalled  # v2's staged states, as the stalled process read them
    assert Catalog(store).resolve("ds").seq == 2  # someone else finishes v2 ...
    catalog.commit("ds", COMMITS[2])  # ... and v3 changes the same directories
    store.staged_dirs.insert_many(stalled)  # the stalled process wakes up
    store._roll_forward("ds", 2, claim["epoch"])
    store.staged_dirs.delete_many({})
    assert mongo_dirs_rows(store) == expected
    check(store)


def test_election_errors_while_the_table_is_written_are_retried(stores) -> None:
    """Every other write to dirs and staged_dirs fails as in an election (done or not done)."""
    from tests.catalog.test_mongo_commit_protocol import Flaky

    expected = clean_table()
    store = stores()
    catalog = Catalog(store)
    catalog.create_dataset("ds")
    writer = stores(sleep=lambda s: None)
    for name, when in (("dirs", "after"), ("staged_dirs", "before")):
        plan = dict.fromkeys(("insert_many", "bulk_write", "delete_many"), when) | {"find": "before"}
        setattr(writer, name, Flaky(getattr(writer, name), **plan))
    for changes in COMMITS:
        Catalog(writer).commit("ds", changes)
    assert writer.dirs.failed and writer.staged_dirs.failed
    assert mongo_dirs_rows(store) == expected
    check(store)


def test_a_table_that_does_not_fit_its_records_is_given_up_not_trusted(stores, caplog) -> None:
    store = stores()
    catalog = committed(store)
    store.dirs.update_one({"path": "d0/", "to_seq": {"$gt": 3}}, {"$set": {"live": 1}})  # edited by hand
    catalog.commit("ds", [Delete(f"d0/f{j}") for j in range(4)])
    assert "does not match its records" in caplog.text
    assert store.datasets.find_one({"_id": "ds"})["dirs"] is False
    assert store.staged_dirs.count_documents({}) == 0
    assert names(catalog.list_directory("ds", 4)) == ["d1/", "d2/", "d3/", "d30/", "d4/"]
    assert store.fill_directory_tables() == ["ds"]
    assert store.datasets.find_one({"_id": "ds"})["dirs"] is True
    assert names(catalog.list_directory("ds", 4)) == ["d1/", "d2/", "d3/", "d30/", "d4/"]
    check(store)


def legacy(store: MongoCatalogStore) -> None:
    """Make the dataset as an older datahub left it: no directory table, no flag."""
    store.datasets.update_one({"_id": "ds"}, {"$unset": {"dirs": ""}})
    store.dirs.delete_many({})


class Killed(Exception):
    pass


def test_the_backfill_of_an_old_dataset_resumes_and_fills_what_commits_keep(stores) -> None:
    expected = clean_table()
    store = stores()
    catalog = committed(store)
    legacy(store)
    check(store)  # listed the old way
    seen: list[tuple[int, int]] = []

    def killed_at_the_third(dataset: str, done: int, total: int) -> None:
        seen.append((done, total))
        if len(seen) == 3:
            raise Killed

    with pytest.raises(Killed):
        backfill(store, "ds", progress=killed_at_the_third, checkpoint_rows=5)
    # halfway: documents stored, the dataset still lists the old way
    assert "dirs" not in store.datasets.find_one({"_id": "ds"})
    assert store.dirs.count_documents({}) > 0
    assert store.dirs_backfill.find_one({"_id": "ds"})["done"] == seen[-1][0]
    check(store)
    resumed: list[tuple[int, int]] = []
    assert backfill(
        store, "ds", progress=lambda d, done, total: resumed.append((done, total)), checkpoint_rows=5
    )
    assert resumed[0][0] == seen[-1][0] > 0  # went on from the checkpoint
    assert resumed[-1][0] == store.records.count_documents({"dataset": "ds"})  # every revision once
    assert mongo_dirs_rows(store) == expected
    assert store.datasets.find_one({"_id": "ds"})["dirs"] is True
    assert store.dirs_backfill.count_documents({}) == 0
    assert store.commits.count_documents({"state": "pending"}) == 0  # its claim of head + 1 released
    check(store)
    catalog.commit("ds", [Put(rec("d9/later"))])  # commits keep the filled table
    assert names(catalog.list_directory("ds", 4)) == ["d0/", "d1/", "d2/", "d3/", "d30/", "d4/", "d9/"]


def test_a_commit_during_the_backfill_makes_it_start_over(stores) -> None:
    store = stores()
    catalog = committed(store, 2)
    legacy(store)
    calls: list[int] = []

    def killed(dataset: str, done: int, total: int) -> None:
        calls.append(done)
        if len(calls) == 2:  # at the first checkpoint
            raise Killed

    with pytest.raises(Killed):
        backfill(store, "ds", progress=killed, checkpoint_rows=5)
    catalog.commit("ds", COMMITS[2])  # while the backfill is stopped: it does not keep the table
    progress: list[int] = []
    assert store.fill_directory_tables(progress=lambda d, done, total: progress.append(done)) == ["ds"]
    assert calls == [0, 5] and progress[0] == 0  # over again from the start
    assert mongo_dirs_rows(store) == clean_table()
    check(store)


def test_a_commit_just_before_the_backfills_claim_makes_it_start_over(stores) -> None:
    """The flag is set under the claim of head + 1: a commit that took that claim first
    published without keeping the half-filled table, and the pass sees the head moved."""
    store = stores()
    committed(store, 2)
    legacy(store)
    landed = {"done": False}
    original = store._claim

    def claim_after_a_commit(dataset, new, base, commit_id):
        if not landed["done"]:  # a commit claims head + 1 just before the pass does
            landed["done"] = True
            Catalog(stores()).commit("ds", COMMITS[2])
        return original(dataset, new, base, commit_id)

    store._claim = claim_after_a_commit  # type: ignore[method-assign]
    assert store.fill_directory_tables() == ["ds"]
    assert landed["done"]
    assert mongo_dirs_rows(store) == clean_table()
    check(store)


def test_a_backfill_whose_claim_was_taken_over_takes_its_flag_back_and_starts_over(stores) -> None:
    """The pass stalls past its lease after setting the flag: a commit takes the claim of
    head + 1 over and publishes. The pass's fenced renewal fails, so it sets the flag back
    (that commit may have read it unset) and starts over on the new head."""
    store = stores()
    committed(store, 2)
    legacy(store)
    original, stalls = store._renew, []

    def stall_then_renew(claim) -> None:
        if not stalls:  # the first renewal: the pass's, after its flag
            stalls.append(store.datasets.find_one({"_id": "ds"})["dirs"])
            stores.clock.now += 61  # type: ignore[attr-defined]
            if store._server_time:
                time.sleep(store.lease_seconds + 0.5)
            Catalog(stores()).commit("ds", COMMITS[2])  # takes the expired claim over
        return original(claim)

    store._renew = stall_then_renew  # type: ignore[method-assign]
    progress: list[int] = []
    assert store.fill_directory_tables(progress=lambda d, done, total: progress.append(done)) == ["ds"]
    assert stalls == [True]  # the flag was set when the pass stalled
    assert progress.count(0) == 2  # the pass started over once
    assert store.datasets.find_one({"_id": "ds"})["dirs"] is True
    assert mongo_dirs_rows(store) == clean_table()
    assert store.commits.count_documents({"state": "pending"}) == 0
    check(store)


def test_datahub_migrate_fills_the_tables_of_an_old_mongo_catalog(
    stores, kind, capsys, monkeypatch, tmp_path
) -> None:
    if kind != "mongomock":
        pytest.skip("the CLI opens its own client: checked on mongomock with a shared one")
    import mongomock

    from datahub.cli.main import main

    store = stores()
    committed(store)
    legacy(store)
    monkeypatch.setattr(mongomock, "MongoClient", lambda *a, **k: store.client)  # the same server
    monkeypatch.delenv("DATAHUB_CONFIG", raising=False)
    monkeypatch.setenv("DATAHUB_CATALOG_URL", store.url)
    monkeypatch.chdir(tmp_path)
    assert main(["--home", str(tmp_path), "migrate"]) == 0
    out, err = capsys.readouterr()
    assert "directory tables filled: ds" in out and "migrate ds: directory table, records" in err
    assert store.datasets.find_one({"_id": "ds"})["dirs"] is True
    assert mongo_dirs_rows(store) == clean_table()
    check(store)


class Examined:
    """A records collection that counts the index entries a server would examine: a listing's
    query is a ``by_key`` range (``dataset``, ``key`` bounds) in key order, filtered per entry,
    and stops at its limit. mongomock scans in Python, so this replays each query's range with
    ``count_documents`` up to its last document; a real server's explain reports the same as
    ``totalKeysExamined``. The directory table's own reads count the documents they return."""

    def __init__(self, records: Any, dirs: Any) -> None:
        self._records, self._dirs = records, dirs
        self.entries = self.queries = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._records, name)

    def find(self, query: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        self.queries += 1
        return _Counted(self, query, self._records.find(query, *args, **kwargs))


class _Counted:
    def __init__(self, owner: Examined, query: dict[str, Any], cursor: Any) -> None:
        self._owner, self._query, self._cursor, self._limit = owner, query, cursor, 0

    def sort(self, *args: Any) -> _Counted:
        self._cursor = self._cursor.sort(*args)
        return self

    def hint(self, index: str) -> _Counted:
        self._cursor = self._cursor.hint(index)
        return self

    def limit(self, n: int) -> _Counted:
        self._cursor, self._limit = self._cursor.limit(n), n
        return self

    def __iter__(self) -> Iterator[dict[str, Any]]:
        docs = list(self._cursor)
        # a query of a level's gaps has one clause (one by_key range) per gap, walked in key order
        for clause in self._query.get("$or", [self._query]):
            bounds = dict(clause.get("key", {}))
            if self._limit and len(docs) == self._limit:  # stopped at its last match
                bounds["$lte"] = docs[-1]["key"]
            scanned = {"dataset": clause["dataset"], "key": bounds}
            self._owner.entries += self._owner._records.count_documents(scanned)
        return iter(docs)


def examined(
    store: MongoCatalogStore, run: Callable[[], Any], queries: list[int] | None = None
) -> tuple[int, Any]:
    """(index entries of ``records`` examined + ``dirs`` documents read, ``run()``); ``queries``
    (a one-item list) gets the number of queries added to it."""
    records, dirs = store.records, store.dirs
    counter = Examined(records, dirs)
    dirs_read = [0]
    asked = queries if queries is not None else [0]

    class CountedDirs:
        def __getattr__(self, name: str) -> Any:
            return getattr(dirs, name)

        def find(self, *args: Any, **kwargs: Any) -> Any:
            asked[0] += 1
            return _Returned(dirs.find(*args, **kwargs), dirs_read)

    store.records, store.dirs = counter, CountedDirs()
    try:
        result = run()
    finally:
        store.records, store.dirs = records, dirs
    asked[0] += counter.queries
    return counter.entries + dirs_read[0], result


class _Returned:
    def __init__(self, cursor: Any, counted: list[int]) -> None:
        self._cursor, self._counted = cursor, counted

    def __getattr__(self, name: str) -> Any:
        chained = getattr(self._cursor, name)
        return lambda *a, **k: _Returned(chained(*a, **k), self._counted)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        docs = list(self._cursor)
        self._counted[0] += len(docs)
        return iter(docs)


def listing_cost(make: Callable[..., MongoCatalogStore], others: int, *, deleted: bool, table: bool) -> int:
    """Entries examined listing the root of a version beside ``others`` revisions not live in it:
    added later under ``s100/`` (between its ``s10/`` and ``s11/``), or added before and deleted
    by it; ``table``: with the directory table, or as a dataset an older datahub made."""
    store = make(batch_size=2000, page_size=2000)
    name = f"big-{others}-{int(deleted)}-{int(table)}"
    catalog = Catalog(store)
    catalog.create_dataset(name)
    base = [Put(rec(k)) for k in ("a", "s10/x", "s11/x", "z")]
    subtree = [f"s100/{i:05d}" for i in range(others)]
    if deleted:
        catalog.commit(name, base + [Put(rec(k)) for k in subtree])
        listed = catalog.commit(name, [Delete(k) for k in subtree]).seq
    else:
        listed = catalog.commit(name, base).seq
        catalog.commit(name, [Put(rec(k)) for k in subtree])
    if not table:
        store.datasets.update_one({"_id": name}, {"$unset": {"dirs": ""}})
    cost, level = examined(store, lambda: names(catalog.list_directory(name, listed)))
    assert level == ["a", "s10/", "s11/", "z"]
    return cost


@pytest.mark.parametrize("deleted", [False, True], ids=["later-subtree", "deleted-subtree"])
def test_a_listing_reads_no_documents_of_subtrees_not_live_in_its_version(stores, deleted: bool) -> None:
    # 10x the revisions not live in the listed version (mongomock inserts slow down with the
    # collection's size: a few hundred keep this quick): the listing examines as many as before
    few, many = (listing_cost(stores, n, deleted=deleted, table=True) for n in (40, 400))
    assert many == few, (few, many)
    # without the table the same listing examines every one of those revisions
    old_few, old_many = (listing_cost(stores, n, deleted=deleted, table=False) for n in (40, 400))
    assert old_many - old_few >= 360, (old_few, old_many)


def test_the_directory_indexes_exist(stores) -> None:
    store = stores()
    assert {"by_parent", "by_path"} <= set(store.dirs.index_information())
    assert store.dirs.index_information()["by_path"].get("unique")
    assert store.staged_dirs.index_information()["by_claim"].get("unique")


def level_queries(make: Callable[..., MongoCatalogStore], gone: int) -> int:
    """Queries (``records`` and ``dirs`` finds) listing the root of a version that keeps 3 of
    the ``3 + gone`` subdirectories its dataset ever had, and 2 files among them."""
    store = make(batch_size=2000, page_size=2000)
    name = f"gone-{gone}"
    catalog = Catalog(store)
    catalog.create_dataset(name)
    subdirectories = [f"s{i:04d}/" for i in range(3 + gone)]
    kept = subdirectories[:: max(1, len(subdirectories) // 3)][:3]
    catalog.commit(name, [Put(rec(k)) for k in ["a", "zz"] + [d + "x" for d in subdirectories]])
    listed = catalog.commit(name, [Delete(d + "x") for d in subdirectories if d not in kept]).seq
    asked = [0]
    _, level = examined(store, lambda: names(catalog.list_directory(name, listed)), asked)
    assert level == ["a", *kept, "zz"]
    return asked[0]


def test_a_level_costs_the_same_queries_however_many_of_its_subdirectories_are_gone(stores) -> None:
    # before, a level read through the table made one query per subdirectory it ever had
    # (here 4 and 203); now one read of the subdirectories and one of the files between them
    few, many = level_queries(stores, 1), level_queries(stores, 200)
    assert few == many == 2, (few, many)


def test_the_roll_forward_writes_a_page_of_directory_states_in_one_bulk_write(stores) -> None:
    """Not one ``update_one`` per directory the commit changed: one ``bulk_write`` (updates of
    the open intervals, inserts of new ones) per page of ``batch_size`` staged states."""
    store = stores(batch_size=50)
    catalog = Catalog(store)
    catalog.create_dataset("ds")
    catalog.commit("ds", [Put(rec(f"d{i:03d}/{j}")) for i in range(120) for j in range(2)])
    calls: dict[str, int] = {}
    dirs = store.dirs

    class Counted:
        def __getattr__(self, name: str) -> Any:
            calls[name] = calls.get(name, 0) + 1
            return getattr(dirs, name)

    store.dirs = Counted()
    try:  # 100 directories change their count, 10 empty, 10 are new: 120 states, 3 pages
        changes = [Delete(f"d{i:03d}/0") for i in range(100)] + [
            Delete(f"d{i:03d}/{j}") for i in range(100, 110) for j in range(2)
        ]
        catalog.commit("ds", changes + [Put(rec(f"n{i:03d}/x")) for i in range(10)])
    finally:
        store.dirs = dirs
    assert calls.get("bulk_write") == 3 and not calls.get("update_one") and not calls.get("insert_many"), (
        calls
    )
    check_level = names(catalog.list_directory("ds", 2))
    assert check_level == [f"d{i:03d}/" for i in range(100)] + [f"d{i:03d}/" for i in range(110, 120)] + [
        f"n{i:03d}/" for i in range(10)
    ]
    assert mongo_dirs_rows(store) == sorted(
        [("ds", "", f"d{i:03d}/", 1, OPEN, 1) for i in range(100)]
        + [("ds", "", f"d{i:03d}/", 1, 2, 0) for i in range(100, 110)]
        + [("ds", "", f"d{i:03d}/", 1, OPEN, 2) for i in range(110, 120)]
        + [("ds", "", f"n{i:03d}/", 2, OPEN, 1) for i in range(10)]
    )
