"""One contract suite for every tier: RAM, disk, shared on a directory, moto, Ceph RGW and RADOS."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.cache import DiskTier, RamTier, SharedTier, make_policy
from datahub.cache.pages import PageKey
from datahub.cache.tier import Tier
from datahub.config import load_config
from datahub.storage import StoreRegistry

BUDGET = 64 * 1024


def key(i: int, etag: str = "e") -> PageKey:
    return PageKey(f"s3://bucket/obj{i}", etag, 1024, 0)


@pytest.fixture(
    params=[
        "ram",
        "disk",
        "shared-dir",
        "shared-moto",
        pytest.param("shared-ceph", marks=pytest.mark.ceph),
        pytest.param("shared-rados", marks=pytest.mark.ceph),
    ]
)
def tier(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Tier]:
    kind = request.param
    if kind == "ram":
        t: Tier = RamTier(BUDGET, make_policy("lru", BUDGET))
    elif kind == "disk":
        t = DiskTier(tmp_path / "disk", BUDGET, make_policy("lru", BUDGET))
    else:
        overrides: dict = {"home": str(tmp_path / "var")}
        if kind == "shared-dir":
            root = (tmp_path / "shared").as_uri()
        elif kind == "shared-rados":  # librados straight to the session Ceph's pool
            ceph = request.getfixturevalue("ceph_cluster")
            monkeypatch = request.getfixturevalue("monkeypatch")
            monkeypatch.syspath_prepend(ceph.vars["CEPH_PYLIB"])
            monkeypatch.setenv("CEPH_CONF", ceph.vars["CEPH_CONF"])
            root = f"rados://{ceph.vars['CEPH_POOL']}/cache-{os.urandom(6).hex()}"
        else:
            endpoint = request.getfixturevalue(f"{kind.split('-')[1]}_endpoint")
            overrides.update(endpoint.s3_config_overrides())
            root = f"s3://{endpoint.new_bucket('cache')}/node-a"
        registry = StoreRegistry(load_config(env={}, overrides=overrides))
        request.addfinalizer(registry.close)
        t = SharedTier(registry.store(root), BUDGET)
    yield t
    t.close()


def test_put_get_contains_delete(tier: Tier) -> None:
    data = os.urandom(1000)
    assert tier.get(key(1)) is None and not tier.contains(key(1))
    assert tier.put(key(1), data)
    assert tier.contains(key(1))
    assert tier.get(key(1)) == data
    assert tier.get(key(1, etag="other")) is None  # another version of the object is another page
    assert tier.usage().used >= 1000
    tier.delete(key(1))
    assert tier.get(key(1)) is None and not tier.contains(key(1))
    tier.delete(key(1))  # idempotent
    stats = tier.stats()
    assert stats["hits"] == 1 and stats["misses"] >= 3 and stats["fills"] == 1


def test_pages_larger_than_the_budget_are_refused(tier: Tier) -> None:
    assert not tier.put(key(2), b"x" * (BUDGET + 1))
    assert tier.get(key(2)) is None


def test_budgeted_tiers_never_exceed_budget_and_evict_between_watermarks(tmp_path: Path) -> None:
    for t in (
        RamTier(10_000, make_policy("lru", 10_000)),
        DiskTier(tmp_path / "d", 10_000, make_policy("lru", 10_000)),
    ):
        for i in range(50):
            assert t.put(key(i), bytes([i]) * 900)
            assert t.usage().used <= 10_000
        t.maintain()
        assert t.usage().used <= 0.8 * 10_000
        assert t.get(key(49)) == bytes([49]) * 900  # the most recent survive
        assert t.get(key(0)) is None
        assert t.counters.evictions > 0
        t.close()


def test_pinned_pages_are_never_evicted_and_a_tier_full_of_pins_refuses(tmp_path: Path) -> None:
    pinned = {key(i) for i in range(5)}
    t = DiskTier(tmp_path / "d", 5000, make_policy("lru", 5000), is_pinned=lambda k: k in pinned)
    for k in sorted(pinned, key=lambda k: k.url):
        assert t.put(k, b"p" * 1000)
    assert not t.put(key(99), b"x" * 1000)  # everything evictable is pinned
    assert t.evict_to(0) == 0
    assert all(t.get(k) == b"p" * 1000 for k in pinned)
    pinned.clear()
    assert t.put(key(99), b"x" * 1000)
    t.close()


def test_disk_tier_survives_a_restart(tmp_path: Path) -> None:
    t = DiskTier(tmp_path / "d", BUDGET, make_policy("lru", BUDGET))
    t.put(key(1), b"abc" * 100)
    t.close()
    t = DiskTier(tmp_path / "d", BUDGET, make_policy("lru", BUDGET))
    assert t.usage().used == 300 and t.usage().entries == 1
    assert t.get(key(1)) == b"abc" * 100
    t.close()


@pytest.mark.parametrize("kind", ["ram", "disk"])
def test_a_miss_racing_a_put_of_the_same_page_keeps_the_page(kind: str, tmp_path: Path) -> None:
    """(The budgeted tiers: they account for their pages in this process.) A reader looks (miss), another thread stores the page, then the reader's miss is
    counted: the page just stored must stay known, not be forgotten as lost (a stream's
    delivered page was fetched from the origin a second time that way)."""
    tier: Tier = (
        RamTier(BUDGET, make_policy("lru", BUDGET))
        if kind == "ram"
        else DiskTier(tmp_path / "disk", BUDGET, make_policy("lru", BUDGET))
    )
    k = key(7)
    load = tier._load  # type: ignore[attr-defined]
    raced = []

    def load_then_put(page_key: PageKey) -> bytes | None:
        data = load(page_key)
        if not raced:
            raced.append(True)
            assert tier.put(k, b"y" * 100)  # lands between the look and the miss's accounting
        return data

    tier._load = load_then_put  # type: ignore[attr-defined]
    got = tier.get(k)
    assert got in (None, b"y" * 100)
    assert tier.known(k) and tier.get(k) == b"y" * 100
