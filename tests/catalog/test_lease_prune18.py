"""Pruning writer leases (``CatalogStore.prune_leases``, ``datahub lease prune``): every workspace
name ever opened left a row for ever. A free lease and one lapsed long ago go; a held one, and a
broken one before its expiry, stay; a holder renewing a pruned lease is refused (it fences),
never given the lease back."""

from __future__ import annotations

from pathlib import Path

import pytest

from datahub.catalog.leases import MAX_TTL, PRUNE_LAPSED
from datahub.errors import Conflict, InvalidInput
from tests.catalog.conftest import make_store


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["sqlite", "mongomock"])
def clocked(request: pytest.FixtureRequest, tmp_path: Path):
    clock = Clock()
    store = make_store(request.param, tmp_path, clock=clock)
    try:
        yield store, clock
    finally:
        store.close()


def names(store) -> list[str]:
    return [lease.name for lease in store.list_leases()]


def test_free_and_long_lapsed_leases_are_pruned_held_and_broken_ones_are_kept(clocked) -> None:
    store, clock = clocked
    store.acquire_lease("released", "o1", "host a pid 1", 60, "pets")
    store.release_lease("released", "o1", 1)
    store.acquire_lease("lapsed", "o2", "host b pid 2", 60)
    store.acquire_lease("broken-at-once", "o3", "host c pid 3", 60)
    store.break_lease("broken-at-once", at_once=True)
    clock.now += PRUNE_LAPSED  # "lapsed" lapsed 60 s short of a day ago
    store.acquire_lease("held", "o4", "host d pid 4", 3600)
    store.acquire_lease("broken", "o5", "host e pid 5", 3600)
    store.break_lease("broken")  # held until its expiry: a live holder may still write
    assert store.prune_leases() == (["broken-at-once", "released"], None)
    clock.now += 60
    assert store.prune_leases() == (["lapsed"], None)
    assert names(store) == ["broken", "held"]
    clock.now += 2 * 3600  # both lapsed an hour ago: pruned only when asked for that
    assert store.prune_leases() == ([], None)
    assert store.prune_leases(lapsed_for=MAX_TTL) == (["broken", "held"], None)
    assert names(store) == []
    with pytest.raises(InvalidInput, match="at least 3600 s"):
        store.prune_leases(lapsed_for=60)  # a holder may not have fenced yet


def test_a_renewal_of_a_pruned_lease_fails_closed(clocked) -> None:
    store, clock = clocked
    assert store.acquire_lease("ws", "owner-a", "host a pid 1", 60).epoch == 1
    clock.now += PRUNE_LAPSED + 60
    assert store.prune_leases() == (["ws"], None)
    with pytest.raises(Conflict, match=r"lease of workspace 'ws' \(epoch 1\) is no longer ours"):
        store.renew_lease("ws", "owner-a", 1, 60)
    assert store.lease("ws") is None  # refused: not re-created by the renewal
    store.release_lease("ws", "owner-a", 1)  # a late release creates nothing either
    assert store.lease("ws") is None
    taken = store.acquire_lease("ws", "owner-b", "host b pid 2", 60)  # a fresh name's take
    assert (taken.owner, taken.epoch) == ("owner-b", 1)
    with pytest.raises(Conflict, match="no longer ours"):
        store.renew_lease("ws", "owner-a", 1, 60)  # the old holder, at the same epoch number


def test_pruning_reads_a_bounded_page_per_call(clocked) -> None:
    store, clock = clocked
    for i in range(5):
        store.acquire_lease(f"ws{i}", f"o{i}", "host", 60)
        store.release_lease(f"ws{i}", f"o{i}", 1)
    clock.now += PRUNE_LAPSED  # free that long (leases.freed_at)
    store.acquire_lease("ws2b", "live", "host", 60)  # held, between two pages' names
    assert store.prune_leases("", 2) == (["ws0", "ws1"], "ws1")
    assert store.prune_leases("ws1", 2) == (["ws2"], "ws2b")
    assert store.prune_leases("ws2b", 2) == (["ws3", "ws4"], "ws4")
    assert store.prune_leases("ws4", 2) == ([], None)
    assert names(store) == ["ws2b"]
    with pytest.raises(InvalidInput, match="1 to 1000"):
        store.prune_leases("", 0)


def test_a_server_client_does_not_prune(tmp_path: Path) -> None:
    store = make_store("http", tmp_path)
    try:
        store.acquire_lease("ws", "o", "host", 60)
        store.release_lease("ws", "o", 1)
        with pytest.raises(InvalidInput, match="against the catalog database itself"):
            store.prune_leases()
        assert store.lease("ws") is not None
    finally:
        store.close()


def test_a_lease_freed_a_moment_ago_keeps_its_commit_target_until_it_was_free_for_lapsed_for(clocked) -> None:
    """review18c: a prune deleted a free lease at once, and with it the name's commit target: a
    workspace between two jobs could then be claimed by anyone with a writer role on some
    dataset (the rule for a name never leased). A lease freed (released, or broken at once) is
    now pruned only once it has been free for ``lapsed_for``."""
    store, clock = clocked
    store.acquire_lease("between-jobs", "o1", "host a pid 1", 60, "pets")
    store.release_lease("between-jobs", "o1", 1)
    store.acquire_lease("dead-node", "o2", "host b pid 2", 60, "pets")
    store.break_lease("dead-node", at_once=True)
    clock.now += PRUNE_LAPSED - 1
    assert store.prune_leases() == ([], None)
    assert store.lease("between-jobs").dataset == "pets"
    assert store.lease("between-jobs").expires <= 0  # free: anyone may take it, for its target
    clock.now += 1
    assert store.prune_leases() == (["between-jobs", "dead-node"], None)
