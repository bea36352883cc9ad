"""Crash safety of the Mongo commit protocol (on mongomock; on a real server too when configured).

A crash is simulated by raising a BaseException from the store's fault hook: like a killed
process, it skips the store's own clean-up, so whatever was written stays behind.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from datahub.catalog import Catalog, Delete, Put
from datahub.catalog.mongo_store import MongoCatalogStore
from datahub.catalog.revisions import OPEN
from datahub.errors import Conflict, ManifestError, VersionNotFound
from tests.catalog.conftest import SMALL, mongo_url, rec

KINDS = ["mongomock"] + (["mongo"] if os.environ.get("DATAHUB_TEST_MONGO_URI") else [])


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
    store = MongoCatalogStore(mongo_url(request.param), clock=clock, lease_seconds=60, **SMALL)
    cat = Catalog(store)
    cat.create_dataset("ds")
    cat.commit("ds", (Put(rec(f"k{i:03d}")) for i in range(40)))  # v1
    try:
        yield store, clock
    finally:
        if request.param == "mongo":
            store.drop()
        store.close()


def second_writer(store: MongoCatalogStore, clock: Clock, **kw: object) -> Catalog:
    """Another process on the same server (same client, so mongomock shares the data)."""
    return Catalog(
        MongoCatalogStore(store.url, client=store.client, clock=clock, lease_seconds=60, **SMALL, **kw)
    )


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
    assert reader.commit("ds", [Put(rec("x"))], commit_id="import-7") == v2  # idempotent afterwards


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
