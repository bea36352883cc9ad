"""Crash safety of the Mongo commit protocol (on mongomock; on a real server too when configured).

A crash is simulated by raising a BaseException from the store's fault hook: like a killed
process, it skips the store's own clean-up, so whatever was written stays behind.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

import pymongo.errors
import pytest

from datahub.catalog import Catalog, Delete, Put
from datahub.catalog.mongo_store import MongoCatalogStore
from datahub.catalog.revisions import OPEN
from datahub.errors import Conflict, ManifestError, StorageError, VersionNotFound
from tests.catalog.conftest import SMALL, mongo_url, rec

NO_SERVER = (
    "needs a real MongoDB replica set: set DATAHUB_TEST_MONGO_URI=mongodb://127.0.0.1:27017/?replicaSet=rs0"
)
REAL = pytest.param(
    "mongo", marks=pytest.mark.skipif(not os.environ.get("DATAHUB_TEST_MONGO_URI"), reason=NO_SERVER)
)
KINDS = ["mongomock", REAL]


class SimulatedCrash(BaseException):
    """Not an Exception: the store must not get a chance to clean up."""


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=KINDS)
def setup(request: pytest.FixtureRequest) -> Iterator[tuple[MongoCatalogStore, Clock]]:
    clock = Clock()
    store = MongoCatalogStore(
        mongo_url(request.param), clock=clock, lease_seconds=LEASE[request.param], **SMALL
    )
    cat = Catalog(store)
    cat.create_dataset("ds")
    cat.commit("ds", (Put(rec(f"k{i:03d}")) for i in range(40)))  # v1
    try:
        yield store, clock
    finally:
        if request.param == "mongo":
            store.drop()
        store.close()


# On mongomock the lease runs on the tests' fake clock (advanced by 61 s to expire it); a real
# server measures it on its own clock, so there it is short and a claimant simply waits it out.
LEASE = {"mongomock": 60.0, "mongo": 5.0}


@pytest.fixture
def atomic_ops(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make each mongomock operation atomic, as each single operation is on a real server.

    mongomock is not a concurrent server: two threads' ``delete_many`` of one document raise
    KeyError, and two inserts of one ``_id`` can both succeed. Tests that commit from several
    threads therefore run every collection operation under one lock (cursors still stream)."""
    import mongomock.collection

    lock = threading.RLock()
    names = ("insert_one", "insert_many", "update_one", "update_many", "replace_one", "delete_one",
             "delete_many", "find_one", "find_one_and_update", "count_documents", "aggregate")  # fmt: skip
    for name in names:
        original = getattr(mongomock.collection.Collection, name)

        def atomic(self, *args, _original=original, **kwargs):
            with lock:
                return _original(self, *args, **kwargs)

        monkeypatch.setattr(mongomock.collection.Collection, name, atomic)


def second_writer(store: MongoCatalogStore, clock: Clock, **kw: object) -> Catalog:
    """Another process on the same server (same client, so mongomock shares the data)."""
    options = {"clock": clock, "lease_seconds": store.lease_seconds} | SMALL | kw
    return Catalog(MongoCatalogStore(store.url, client=store.client, **options))  # type: ignore[arg-type]


def crash_at(point: str, after: int = 1):
    calls = {"n": 0}

    def fault(where: str) -> None:
        if where == point:
            calls["n"] += 1
            if calls["n"] >= after:
                raise SimulatedCrash(where)

    return fault


def change_set() -> list:
    return [Put(rec(f"k{i:03d}", etag="new")) for i in range(0, 40, 2)] + [Delete("k001"), Put(rec("z"))]


def race_on_a_claim(
    store: MongoCatalogStore,
    clock: Clock,
    b_changes: list,
    *,
    commit: dict | None = None,
    b_writer: dict | None = None,
    wait: float = 60.0,
) -> dict[str, object]:
    """A commits ``change_set()`` and holds its claim half-way; B (``second_writer`` with
    ``b_writer``'s options) starts then, waits on that claim (its ``sleep`` says so), and both
    run to their end, each with ``commit``'s arguments. Each one's version or exception, by
    name ("a", "b"). ``wait``: how long A waits for B to wait before it fails the test."""
    a_claimed, b_waiting = threading.Event(), threading.Event()

    def a_changes():
        yield from change_set()[:20]
        a_claimed.set()
        assert b_waiting.wait(wait), "B never waited for A's claim"
        yield from change_set()[20:]

    def b_sleep(seconds: float) -> None:
        b_waiting.set()
        time.sleep(min(seconds, 0.05))

    results: dict[str, object] = {}

    def run(name: str, cat: Catalog, changes) -> None:
        try:
            results[name] = cat.commit("ds", changes, **(commit or {}))
        except BaseException as exc:  # reported by the callers' assertions
            results[name] = exc

    a = threading.Thread(target=run, args=("a", second_writer(store, clock), a_changes()))
    a.start()
    assert a_claimed.wait(60)
    b_cat = second_writer(store, clock, sleep=b_sleep, **(b_writer or {}))
    b = threading.Thread(target=run, args=("b", b_cat, b_changes))
    b.start()
    a.join(120)
    b.join(120)
    return results


def expected_v2() -> dict[str, str]:
    state = {f"k{i:03d}": "e1" for i in range(40)}
    state.update({f"k{i:03d}": "new" for i in range(0, 40, 2)})
    del state["k001"]
    state["z"] = "e1"
    return state


def listing(cat: Catalog, ref: object) -> dict[str, str]:
    return {r.key: r.etag for r in cat.list_records("ds", ref)}


def test_crash_midway_is_invisible_then_retry_recovers(setup) -> None:
    store, clock = setup
    crashing = second_writer(store, clock, fault=crash_at("batch-written", after=2))
    with pytest.raises(SimulatedCrash):
        crashing.commit("ds", change_set(), commit_id="import-7")
    # Some changes of the dead commit are on the server (staged under its claim's epoch) ...
    assert store.staged.count_documents({"dataset": "ds", "seq": 2}) > 0
    # ... yet nobody sees a half-written version.
    reader = Catalog(store)
    assert reader.resolve("ds").seq == 1
    assert listing(reader, 1) == {f"k{i:03d}": "e1" for i in range(40)}
    with pytest.raises(VersionNotFound):
        reader.resolve("ds", 2)
    # While the dead writer's lease runs, a new commit waits for it, then gives a clear conflict.
    impatient = second_writer(store, clock, claim_wait_seconds=0)
    with pytest.raises(Conflict, match="in progress"):
        impatient.commit("ds", [Put(rec("other"))])
    clock.now += 61
    v2 = reader.commit("ds", change_set(), commit_id="import-7")  # the retry takes over and redoes it
    assert v2.seq == 2 and (v2.added, v2.removed, v2.modified) == (1, 1, 20)
    assert listing(reader, 2) == expected_v2()
    assert listing(reader, 1) == {f"k{i:03d}": "e1" for i in range(40)}
    assert store.records.count_documents({"dataset": "ds", "from_seq": 2}) == 21  # no strays left
    assert store.staged.count_documents({"dataset": "ds"}) == 0
    assert reader.commit("ds", change_set(), commit_id="import-7") == v2  # idempotent afterwards


def test_retry_after_lease_without_commit_id_cleans_up(setup) -> None:
    store, clock = setup
    crashing = second_writer(store, clock, fault=crash_at("batch-written", after=1))
    with pytest.raises(SimulatedCrash):
        crashing.commit("ds", change_set())
    clock.now += 61
    cat = Catalog(store)
    v2 = cat.commit("ds", [Put(rec("only"))])
    assert (v2.seq, v2.added, v2.removed, v2.modified, v2.record_count) == (2, 1, 0, 0, 41)
    assert listing(cat, 2) == {f"k{i:03d}": "e1" for i in range(40)} | {"only": "e1"}
    assert [(e.kind, e.key) for e in cat.diff("ds", 1, 2)] == [("added", "only")]


def test_crash_while_publishing_is_finished_not_undone(setup) -> None:
    store, clock = setup
    crashing = second_writer(store, clock, fault=crash_at("publishing"))
    with pytest.raises(SimulatedCrash):
        crashing.commit("ds", change_set(), commit_id="import-8")
    cat = Catalog(store)
    # Every write was in place and the commit was decided: the next reader of the head finishes it.
    assert cat.resolve("ds").seq == 2
    assert listing(cat, 2) == expected_v2()
    again = cat.commit("ds", change_set(), commit_id="import-8")
    assert again.seq == 2 and [v.seq for v in cat.log("ds")] == [2, 1]


def test_failed_commit_cleans_up_after_itself(setup) -> None:
    store, _ = setup

    def manifest():
        yield from change_set()
        raise ManifestError("manifest line 23: bad JSON")

    cat = Catalog(store)
    with pytest.raises(ManifestError):
        cat.commit("ds", manifest())
    assert store.records.count_documents({"dataset": "ds", "from_seq": 2}) == 0
    assert store.records.count_documents({"dataset": "ds", "to_seq": 2}) == 0
    assert store.commits.count_documents({"dataset": "ds", "state": "pending"}) == 0
    assert store.staged.count_documents({"dataset": "ds"}) == 0
    assert cat.commit("ds", [Put(rec("x"))]).seq == 2  # no lease to wait for


def test_stalled_writer_loses_its_claim(setup) -> None:
    store, clock = setup
    other = second_writer(store, clock)

    def slow_changes():
        yield from change_set()[:20]  # a few batches are written under writer A's lease ...
        clock.now += 61  # ... then A stalls past its lease and B takes over and commits
        assert other.commit("ds", [Put(rec("b-wins"))]).seq == 2
        yield from change_set()[20:]

    with pytest.raises(Conflict, match="another writer"):
        Catalog(store).commit("ds", slow_changes())
    cat = Catalog(store)
    assert cat.resolve("ds").seq == 2
    assert listing(cat, 2) == {f"k{i:03d}": "e1" for i in range(40)} | {"b-wins": "e1"}


def test_commit_writes_documents_in_proportion_to_changes(setup) -> None:
    """O(changes): a 2-change commit on 40 records adds one revision and closes two."""
    store, _ = setup
    Catalog(store).commit("ds", [Put(rec("k007", etag="new")), Delete("k012")])
    ranges = sorted((d["from_seq"], d["to_seq"]) for d in store.records.find({"dataset": "ds"}))
    assert ranges == [(1, 2)] * 2 + [(1, OPEN)] * 38 + [(2, OPEN)]


def test_writer_stalled_between_renewal_and_write_cannot_touch_published_versions(setup) -> None:
    """Fencing: A renews its lease, then stalls past it (GC pause, frozen VM, lost primary) while
    B takes the claim over and publishes v2 and v3. A's late writes must change nothing readers
    see, and A's commit must fail."""
    store, clock = setup
    other = second_writer(store, clock)
    state: dict[str, object] = {"stalled": False}

    def stall(point: str) -> None:
        if point == "renewed" and not state["stalled"]:
            state["stalled"] = True
            clock.now += 61  # A's lease runs out (on the store's time source) ...
            assert other.commit("ds", [Put(rec("k003", etag="b")), Delete("k005")]).seq == 2  # ... B wins
            assert other.commit("ds", [Put(rec("k007", etag="c"))]).seq == 3
            state["published"] = snapshot(store)

    stalled = second_writer(store, clock, fault=stall)
    with pytest.raises(Conflict, match="another writer"):
        stalled.commit("ds", change_set())
    cat = Catalog(store)
    assert cat.resolve("ds").seq == 3
    assert snapshot(store) == state["published"]  # every published revision byte-identical
    v1 = {f"k{i:03d}": "e1" for i in range(40)}
    assert listing(cat, 1) == v1
    assert listing(cat, 2) == {k: e for k, e in v1.items() if k != "k005"} | {"k003": "b"}
    assert listing(cat, 3) == {k: e for k, e in v1.items() if k != "k005"} | {"k003": "b", "k007": "c"}
    assert cat.commit("ds", [Put(rec("after"))]).seq == 4  # nothing left to wait for


def snapshot(store: MongoCatalogStore) -> list[dict]:
    """Every record revision and version document as stored (sorted, ids dropped)."""
    revisions = sorted(
        (sorted(d.items()) for d in store.records.find({"dataset": "ds"}, {"_id": 0})), key=repr
    )
    versions = sorted(
        (sorted(d.items()) for d in store.versions.find({"dataset": "ds"}, {"_id": 0})), key=repr
    )
    return [repr(revisions), repr(versions)]


def test_racing_commit_waits_for_the_running_one_then_commits_on_the_new_head(setup, atomic_ops) -> None:
    """Like SQLite's write lock: B does not get 409 while A commits; it waits, sees A's version
    (StaleBase inside the store), and the facade commits B on the new head."""
    store, clock = setup
    results = race_on_a_claim(store, clock, [Put(rec("b"))])
    assert [getattr(results[n], "seq", results[n]) for n in "ab"] == [2, 3]
    cat = Catalog(store)
    assert listing(cat, 2) == expected_v2()
    assert listing(cat, 3) == expected_v2() | {"b": "e1"}


def test_dead_writers_claim_is_taken_over_as_soon_as_its_lease_expires(setup) -> None:
    """A writer that died (or sits behind a partition during an election) blocks the dataset only
    until its lease runs out on the server's clock; the next commit waits that long, not 60 s more."""
    store, clock = setup
    crashing = second_writer(store, clock, fault=crash_at("batch-written", after=1))
    with pytest.raises(SimulatedCrash):
        crashing.commit("ds", change_set())
    waits: list[float] = []

    def sleep(seconds: float) -> None:  # the server's clock moves on while the claimant waits
        waits.append(seconds)
        clock.now += seconds
        if store._server_time:
            time.sleep(seconds)

    v2 = second_writer(store, clock, sleep=sleep, claim_wait_seconds=120).commit("ds", [Put(rec("next"))])
    assert v2.seq == 2 and listing(Catalog(store), 2) == {f"k{i:03d}": "e1" for i in range(40)} | {
        "next": "e1"
    }
    assert waits and sum(waits) <= store.lease_seconds + 2  # taken over right after the lease expired


class Flaky:
    """A collection whose chosen operations fail on every other call with an election error,
    before the operation took effect (NotPrimary) or after it (connection lost after the write)."""

    def __init__(self, collection, **plan: str) -> None:
        self._collection, self._plan = collection, plan
        self._calls: dict[str, int] = {}
        self.failed = 0

    def __getattr__(self, name: str):
        target = getattr(self._collection, name)
        when = self._plan.get(name)
        if when is None:
            return target

        def flaky(*args, **kwargs):
            self._calls[name] = self._calls.get(name, 0) + 1
            if self._calls[name] % 2 == 0:
                return target(*args, **kwargs)
            self.failed += 1
            if when == "after":
                target(*args, **kwargs)
                raise pymongo.errors.AutoReconnect("connection closed after the write")
            raise pymongo.errors.NotPrimaryError(
                "not primary", {"code": 10107, "errorLabels": ["RetryableWriteError"]}
            )

        return flaky


WRITES = ("insert_many", "update_one", "update_many", "delete_many", "find_one_and_update")


@pytest.mark.parametrize("when", ["before", "after"])
def test_election_mid_commit_is_retried_with_the_same_claim(setup, when: str) -> None:
    """Every other call of every protocol operation fails as during a primary election, with the
    write not done or done (reply lost); the commit still lands exactly once, and right."""
    store, clock = setup
    writer = second_writer(store, clock, sleep=lambda s: None)
    w = writer.store
    plan = dict.fromkeys(WRITES, when) | {"find": "before", "find_one": "before"}
    for name in ("staged", "commits", "records", "epochs"):
        setattr(w, name, Flaky(getattr(w, name), **plan))
    changes = change_set() + [Put(rec("k000", etag="again")), Delete("k002")]  # keys staged twice
    v2 = writer.commit("ds", changes, commit_id="import-9")
    assert sum(getattr(w, n).failed for n in ("staged", "commits", "records", "epochs")) >= 10
    assert (v2.seq, v2.added, v2.removed, v2.modified, v2.record_count) == (2, 1, 2, 19, 39)
    cat = Catalog(store)
    expected = expected_v2() | {"k000": "again"}
    del expected["k002"]
    assert listing(cat, 2) == expected
    assert listing(cat, 1) == {f"k{i:03d}": "e1" for i in range(40)}
    assert store.records.count_documents({"dataset": "ds", "from_seq": 2}) == 20
    assert store.commits.count_documents({"dataset": "ds", "state": {"$ne": "committed"}}) == 0
    assert store.staged.count_documents({}) == 0
    assert cat.commit("ds", changes, commit_id="import-9") == v2  # the client's own retry


def test_a_non_transient_error_is_not_retried_and_leaves_nothing(setup) -> None:
    store, clock = setup
    writer = second_writer(store, clock, sleep=lambda s: None)

    class Broken:
        def __init__(self, collection) -> None:
            self._collection = collection

        def __getattr__(self, name: str):
            if name == "insert_many":
                raise pymongo.errors.OperationFailure("disk full", code=14031)
            return getattr(self._collection, name)

    writer.store.staged = Broken(writer.store.staged)  # type: ignore[attr-defined]
    with pytest.raises(StorageError, match="disk full"):
        writer.commit("ds", change_set())
    cat = Catalog(store)
    assert cat.resolve("ds").seq == 1 and listing(cat, 1) == {f"k{i:03d}": "e1" for i in range(40)}
    assert store.commits.count_documents({"dataset": "ds", "state": "pending"}) == 0
    assert cat.commit("ds", [Put(rec("x"))]).seq == 2


def test_lease_is_decided_by_the_server_clock_not_the_claimants(setup) -> None:
    """Two API servers whose clocks disagree by an hour: the one running ahead must not take over
    a live claim (it would fence out a healthy writer)."""
    store, clock = setup
    if not store._server_time:
        pytest.skip("mongomock has no server clock ($$NOW); the real-server suite checks this")
    crashing = second_writer(store, clock, fault=crash_at("batch-written", after=1))
    with pytest.raises(SimulatedCrash):
        crashing.commit("ds", change_set())
    ahead = Clock()
    ahead.now = clock.now + 3600
    with pytest.raises(Conflict, match="in progress"):
        second_writer(store, ahead, claim_wait_seconds=0).commit("ds", [Put(rec("other"))])


def test_claim_left_by_the_unfenced_protocol_is_cleaned_up(setup) -> None:
    """A pending claim without an epoch (a server from before fencing died mid-commit) wrote
    revisions directly; taking it over removes them."""
    store, clock = setup
    store.commits.insert_one(
        {
            "_id": "ds@2",
            "dataset": "ds",
            "seq": 2,
            "base": 1,
            "owner": "old",
            "state": "pending",
            "lease_until": 0.0,
            "commit_id": None,
        }  # fmt: skip
    )
    store.records.update_many({"dataset": "ds", "key": "k004"}, {"$set": {"to_seq": 2, "closed_by": "old"}})
    store.records.insert_one({"dataset": "ds", "key": "stray", "from_seq": 2, "to_seq": OPEN, "url": "s3://b/s",
                              "etag": "e", "size": 1, "commit": "old"})  # fmt: skip
    cat = Catalog(store)
    assert cat.commit("ds", [Put(rec("new"))]).seq == 2
    assert listing(cat, 2) == {f"k{i:03d}": "e1" for i in range(40)} | {"new": "e1"}


def test_concurrent_commits_on_the_head_all_land_once(setup, atomic_ops) -> None:
    """Four API servers commit on the head at once: each waits for the running commit, then
    rebases, so all four land (no 409), each exactly once, in some order."""
    store, clock = setup
    start = threading.Barrier(4)
    results: dict[int, object] = {}

    def run(i: int) -> None:
        cat = second_writer(store, clock)
        start.wait(60)
        try:
            results[i] = cat.commit("ds", [Put(rec(f"w{i}"))] + [Put(rec(f"w{i}-{j}")) for j in range(20)])
        except BaseException as exc:  # reported by the assertion below
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(getattr(r, "seq", r) for r in results.values()) == [2, 3, 4, 5]
    cat = Catalog(store)
    final = listing(cat, 5)
    assert len(final) == 40 + 4 * 21 and all(f"w{i}" in final for i in range(4))
    for v in cat.log("ds"):
        assert len(listing(cat, v.seq)) == v.record_count


def test_publishing_claim_left_by_the_unfenced_protocol_is_finished(setup) -> None:
    """The unfenced protocol wrote revisions in place before its flip: a claim it left in
    ``publishing`` is finished as it was (its version document inserted), not rolled forward."""
    store, clock = setup
    store.records.update_many({"dataset": "ds", "key": "k004"}, {"$set": {"to_seq": 2, "closed_by": "old"}})
    version = store.versions.find_one({"dataset": "ds", "seq": 1}) | {
        "_id": "ds@2", "seq": 2, "parent": 1, "record_count": 39, "total_bytes": 390,
        "added": 0, "removed": 1, "modified": 0, "commit_id": "old-1"}  # fmt: skip
    store.commits.insert_one({"_id": "ds@2", "dataset": "ds", "seq": 2, "base": 1, "owner": "old",
                              "state": "publishing", "lease_until": 0.0, "commit_id": "old-1",
                              "version": version})  # fmt: skip
    cat = Catalog(store)
    assert cat.resolve("ds").seq == 2
    assert listing(cat, 2) == {f"k{i:03d}": "e1" for i in range(40) if i != 4}
    assert cat.commit("ds", [Put(rec("new"))]).seq == 3
