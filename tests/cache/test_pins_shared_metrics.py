"""Pins (kept on disk, persisted across restarts), the shared tier between two nodes, metrics."""

from __future__ import annotations

from pathlib import Path

import pytest

from datahub.cache import open_cache
from datahub.cache.metrics import prometheus_text
from datahub.cache.pages import page_key
from datahub.cache.stats import read_snapshots, stats_dir, summarize
from datahub.config import load_config
from datahub.errors import InvalidInput
from datahub.storage import StoreRegistry
from tests.cache.conftest import put_objects, with_cache


def test_pinned_objects_stay_on_disk_until_unpinned_even_across_restarts(make_cache, source) -> None:
    pinned = put_objects(source, [1000] * 4, prefix="pinned")
    others = put_objects(source, [1000] * 20, prefix="other", seed=1)
    cache = make_cache(disk_bytes=8 * 1024, ram_bytes=0, policy="lru")
    assert cache.pins.pin("ds@v1", (ref for ref, _ in pinned)) == 4
    cache.prefetch(ref for ref, _ in pinned)
    for ref, data in others:  # 20 KiB through an 8 KiB disk: everything unpinned churns
        assert cache.read(ref) == data
        cache.maintain()
    [disk] = cache.tiers
    assert all(disk.contains(page_key(r, 1024, 0)) for r, _ in pinned)
    assert disk.usage().used <= 8 * 1024 and disk.counters.evictions > 0
    cache.close()

    again = make_cache(disk_bytes=8 * 1024, ram_bytes=0, policy="lru")
    assert again.pins.names() == {"ds@v1": 4}
    for ref, _ in others:
        again.read(ref)
    fetches = again.origin.counters.fetches
    for ref, data in pinned:
        assert again.read(ref) == data
    assert again.origin.counters.fetches == fetches  # pinned pages never left the disk
    assert again.pins.unpin("ds@v1") and not again.pins.unpin("ds@v1")
    for ref, _ in others:
        again.read(ref)
        again.maintain()
    [disk] = again.tiers
    assert not all(disk.contains(page_key(r, 1024, 0)) for r, _ in pinned)
    with pytest.raises(InvalidInput):
        again.pins.pin("", [])


@pytest.mark.parametrize("endpoint_name", ["moto", pytest.param("ceph", marks=pytest.mark.ceph)])
def test_a_second_node_reads_pages_from_the_shared_tier(endpoint_name, request, tmp_path: Path) -> None:
    endpoint = request.getfixturevalue(f"{endpoint_name}_endpoint")
    shared = f"s3://{endpoint.new_bucket('shared')}/cache"
    origin_bucket = endpoint.new_bucket("origin")

    def node(name: str):
        config = load_config(
            env={}, overrides={"home": str(tmp_path / name), **endpoint.s3_config_overrides()}
        )
        return with_cache(config, page_size=1024, shared_url=shared, ram_bytes=1 << 20, disk_bytes=1 << 20)

    config_a = node("a")
    with StoreRegistry(config_a) as registry_a, open_cache(config_a, registry_a) as a:
        objects = put_objects(registry_a.store(f"s3://{origin_bucket}"), [2500, 100])
        for ref, data in objects:
            assert a.read(ref) == data
        assert [t.name for t in a.tiers] == ["ram", "disk", "shared"]
        assert a.tiers[2].counters.fills == 4
    config_b = node("b")
    with StoreRegistry(config_b) as registry_b, open_cache(config_b, registry_b) as b:
        for ref, data in objects:
            assert b.read(ref) == data
        assert b.origin.counters.fetches == 0
        ram, disk, shared_tier = b.tiers
        assert (
            shared_tier.counters.hits == 4 and disk.counters.promotions == 4 and ram.counters.promotions == 4
        )
        # budget: everything above the low watermark is swept, oldest first
        shared_tier.budget = 2000
        assert shared_tier.sweep() >= 2
        assert shared_tier.usage().used <= 0.8 * 2000


def test_metrics_and_stats_snapshots(config, make_cache, source) -> None:
    [(ref, _)] = put_objects(source, [3000])
    cache = make_cache()
    cache.read(ref)
    cache.read(ref)
    text = prometheus_text(cache)
    assert 'datahub_cache_hits_total{tier="ram"} 3' in text
    assert 'datahub_cache_misses_total{tier="disk"} 3' in text
    assert "datahub_origin_fetches_total 3" in text
    assert "# TYPE datahub_cache_used_bytes gauge" in text
    cache.maintain()  # writes the snapshot another process (the CLI) reads
    snaps = read_snapshots(stats_dir(config))
    assert len(snaps) == 1
    tiers = summarize(snaps)
    assert tiers["ram"]["hits"] == 3 and tiers["ram"]["hit_ratio"] == 0.5
    cache.close()
    assert read_snapshots(stats_dir(config)) == []
