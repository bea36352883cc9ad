"""Policies alone, and the epoch-loop behaviour that motivates the scan-resistant one."""

from __future__ import annotations

import random

import pytest

from datahub.cache.pages import PageKey
from datahub.cache.policy import LRU, SLRU, TinyLFU, make_policy
from datahub.cache.ram import RamTier
from datahub.errors import InvalidInput


def test_lru_evicts_least_recently_used_first() -> None:
    p = LRU()
    for k in "abc":
        p.on_insert(k, 1)
    p.on_hit("a")
    assert list(p.victims()) == ["b", "c", "a"]
    p.on_remove("c")
    assert list(p.victims()) == ["b", "a"]


def test_slru_protects_pages_hit_twice_from_a_scan() -> None:
    p = SLRU(budget=10)
    p.on_insert("hot", 1)
    p.on_hit("hot")  # promoted to the protected segment
    for i in range(20):
        p.on_insert(f"scan{i}", 1)
    assert list(p.victims())[-1] == "hot"
    assert list(p.victims())[0] == "scan0"


def test_tinylfu_admits_only_more_frequent_newcomers() -> None:
    p = TinyLFU(budget=1000, typical_size=10)
    for _ in range(3):
        p.on_miss("popular")
    p.on_miss("rare")
    assert p.admit("popular", "rare")
    assert not p.admit("rare", "popular")
    assert not p.admit("rare", "rare2") or p.sketch.estimate("rare2") < 1
    assert p.admit("anything", None)


def test_unknown_policy_names_the_choices() -> None:
    with pytest.raises(InvalidInput, match="lru, slru, tinylfu"):
        make_policy("fifo", 100)


PAGE = bytes(64 * 1024)


def epoch_hit_ratio(
    policy: str, cache_pages: int, dataset_pages: int, epochs: int = 2, shuffle: bool = False
) -> float:
    """Last-epoch hit ratio of a RAM tier reading pages 0..N-1 each epoch (in order or shuffled).

    ``maintain`` runs after every read, as the background evictor may at any moment.
    """
    page = 64 * 1024
    tier = RamTier(cache_pages * page, make_policy(policy, cache_pages * page))
    rng = random.Random(3)
    hits = 0
    for epoch in range(epochs):
        order = rng.sample(range(dataset_pages), dataset_pages) if shuffle else range(dataset_pages)
        for i in order:
            key = PageKey("memory://x/data", "e", page, i)
            if tier.get(key) is not None:
                hits += epoch == epochs - 1
            else:
                tier.put(key, PAGE)
            tier.maintain()
    return hits / dataset_pages


def test_epoch_loop_lru_gets_nothing_tinylfu_keeps_a_stable_subset() -> None:
    bound = 100 / 150
    assert epoch_hit_ratio("lru", 100, 150) == 0.0
    assert epoch_hit_ratio("slru", 100, 150) == 0.0
    ratio = epoch_hit_ratio("tinylfu", 100, 150)
    assert ratio >= 0.8 * bound, ratio
    assert epoch_hit_ratio("tinylfu", 100, 150, epochs=5) >= 0.8 * bound


@pytest.mark.parametrize("shuffle", [False, True])
def test_tinylfu_subset_stays_stable_at_scale_despite_sketch_collisions(shuffle) -> None:
    """3000 keys: count-min collisions admit a few newcomers; that must not start a cascade."""
    bound = 2000 / 3000
    assert epoch_hit_ratio("tinylfu", 2000, 3000, epochs=3, shuffle=shuffle) >= 0.9 * bound
    assert epoch_hit_ratio("lru", 2000, 3000, shuffle=shuffle) < 0.5 * bound


@pytest.mark.parametrize("name", ["lru", "slru", "tinylfu"])
def test_a_batch_of_hits_leaves_the_state_one_hit_at_a_time_leaves(name: str) -> None:
    """``on_hits`` (the once-a-second fold of hits answered in C) is ``on_hit`` of each key in
    order: the same victims' order, segments and sketch counts, across the sketch's halving
    (a small budget: ``sample`` adds come within the batch) and with keys not stored."""
    rng = random.Random(7)
    one, batch = make_policy(name, 40), make_policy(name, 40)
    for p in (one, batch):
        for i in range(30):
            p.on_insert(i, 1 + i % 3)
    hits = [rng.randrange(40) for _ in range(3000)]  # 30..39 were never stored
    for key in hits:
        one.on_hit(key)
    for start in range(0, len(hits), 700):
        batch.on_hits(iter(hits[start : start + 700]))  # any iterable
    assert list(batch.victims()) == list(one.victims())
    if name != "lru":
        assert batch._protected_bytes == one._protected_bytes
        assert list(batch._protected) == list(one._protected)
    if name == "tinylfu":
        assert batch.sketch._added == one.sketch._added
        assert batch.sketch._rows == one.sketch._rows
        assert [batch.sketch.estimate(k) for k in range(40)] == [one.sketch.estimate(k) for k in range(40)]
