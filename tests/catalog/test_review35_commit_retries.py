"""review35: a commit's retry (same commit id) that races its own first attempt on MongoDB.

Why: over HTTP a client whose answer does not come back in time (a large commit, a proxy
cutting the connection) retries with the same commit id and the same explicit base while the
server still runs the first attempt. The retry must answer the version that id made, never
``stale_base`` (which the caller can only take for "redo the work on the new head")."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from datahub.catalog import Catalog, Put
from datahub.catalog.mongo_store import MongoCatalogStore
from tests.catalog.conftest import SMALL, mongo_url, rec
from tests.catalog.test_mongo_commit_protocol import (
    Clock,
    change_set,
    expected_v2,
    listing,
    race_on_a_claim,
    second_writer,
)
from tests.catalog.test_mongo_commit_protocol import atomic_ops as atomic_ops  # the fixture


@pytest.fixture
def setup() -> Iterator[tuple[MongoCatalogStore, Clock]]:
    clock = Clock()
    store = MongoCatalogStore(mongo_url("mongomock"), clock=clock, lease_seconds=60.0, **SMALL)
    cat = Catalog(store)
    cat.create_dataset("ds")
    cat.commit("ds", [Put(rec(f"k{i:03d}")) for i in range(40)])  # v1
    try:
        yield store, clock
    finally:
        store.close()


def test_a_retry_waiting_on_its_own_first_attempts_claim_answers_that_version(setup, atomic_ops) -> None:
    """A (the first attempt) holds the claim of v2; B (its retry: same id, same base 1) waits on
    that claim; A publishes. B must return A's v2, not stale_base, and no v3 appears."""
    store, clock = setup
    results = race_on_a_claim(store, clock, change_set(), commit={"base": 1, "commit_id": "import-9"})
    assert getattr(results["a"], "seq", results["a"]) == 2
    assert results["b"] == results["a"]
    cat = Catalog(store)
    assert [v.seq for v in cat.log("ds")] == [2, 1]
    assert listing(cat, 2) == expected_v2()


def test_a_retry_that_finds_the_head_moved_by_its_own_first_attempt_answers_that_version(setup) -> None:
    """The first attempt publishes between the retry's look for its id and its read of the head
    (the window is widened by making the look miss once): the retry answers v2, not stale_base."""
    store, clock = setup
    first = Catalog(store).commit("ds", change_set(), base=1, commit_id="import-10")
    retry = second_writer(store, clock)
    finished = retry.store._finished  # type: ignore[attr-defined]
    calls = {"n": 0}

    def late(dataset: str, commit_id: str) -> int | None:
        calls["n"] += 1
        return None if calls["n"] == 1 else finished(dataset, commit_id)

    retry.store._finished = late  # type: ignore[attr-defined]
    assert retry.commit("ds", change_set(), base=1, commit_id="import-10") == first
    assert [v.seq for v in retry.log("ds")] == [2, 1]


class _AbandonedBeforeLook:
    """B's ``commits`` collection: between B's failed insert of the claim (another writer holds
    it) and B's look at that claim, the holder fails and abandons it (its ``_abandon``)."""

    def __init__(self, inner: object, abandon) -> None:
        self.inner, self.abandon, self.done = inner, abandon, False

    def find_one(self, query, *args, **kwargs):
        if not self.done and set(query) == {"_id"}:
            self.done = True
            self.abandon()
        return self.inner.find_one(query, *args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


def test_a_claim_abandoned_while_a_racer_looks_at_it_is_not_a_stale_base(setup) -> None:
    """A's commit of v2 fails (its claim abandoned) just as B finds the claim taken: the head is
    still v1, so B (explicit base 1, as the API passes it) must commit v2, not get stale_base
    saying that "another commit just created version 2"."""
    store, clock = setup
    a = second_writer(store, clock).store
    claim = a._claim("ds", 2, 1, None)  # type: ignore[attr-defined]
    b = second_writer(store, clock)
    b.store.commits = _AbandonedBeforeLook(b.store.commits, lambda: a._abandon(claim))  # type: ignore[attr-defined]
    v2 = b.commit("ds", [Put(rec("b"))], base=1)
    assert (v2.seq, v2.parent, v2.added) == (2, 1, 1)
    assert [v.seq for v in b.log("ds")] == [2, 1]


def test_a_retry_whose_first_attempt_outlasts_the_claim_wait_waits_for_it_not_conflict(
    setup, atomic_ops
) -> None:
    """B (a retry: same id) would give up on another commit's claim after claim_wait_seconds
    (0 here) with 409 "in progress". The claim's holder is B's own first attempt, whose lease
    is live: B waits for it (its lease bounds the wait) and answers its version; a caller who
    gave no id of its own could only have committed the changes again as a second version."""
    store, clock = setup
    results = race_on_a_claim(
        store,
        clock,
        change_set(),
        commit={"base": 1, "commit_id": "import-11"},
        b_writer={"claim_wait_seconds": 0},
        wait=10,
    )
    assert getattr(results["a"], "seq", results["a"]) == 2
    assert results["b"] == results["a"]
    assert [v.seq for v in Catalog(store).log("ds")] == [2, 1]
