"""Property tests: any read through any tier layout equals the source bytes, and eviction
keeps its invariants (usage within budget, pinned pages never evicted, bytes never altered)."""

from __future__ import annotations

import tempfile
import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datahub.cache import DiskTier, RamTier, make_policy, open_cache
from datahub.cache.pages import PageKey
from datahub.config import load_config
from datahub.storage import StoreRegistry, drop_memory_space

POLICY = st.sampled_from(["lru", "slru", "tinylfu"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(0, 5000), min_size=1, max_size=4),
    page_size=st.sampled_from([64, 100, 1000, 4096]),
    ram=st.sampled_from([0, 300, 5000, 1 << 20]),
    disk=st.sampled_from([0, 700, 1 << 20]),
    policy=POLICY,
    reads=st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 5200), st.one_of(st.none(), st.integers(0, 3000))),
        min_size=1,
        max_size=25,
    ),
    data=st.data(),
)
def test_random_reads_equal_the_source(sizes, page_size, ram, disk, policy, reads, data) -> None:
    space = f"prop-{uuid.uuid4().hex[:10]}"
    with tempfile.TemporaryDirectory() as home:
        config = load_config(env={}, overrides={"home": home})
        config = config.model_copy(
            update={
                "cache": config.cache.model_copy(
                    update={
                        "page_size": page_size,
                        "ram_bytes": ram,
                        "disk_bytes": disk,
                        "policy": policy,
                        "readahead_bytes": 2 * page_size,
                    }
                )
            }
        )
        with StoreRegistry(config) as stores, open_cache(config, stores) as cache:
            store = stores.store(f"memory://{space}")
            objects = []
            for i, size in enumerate(sizes):
                blob = data.draw(st.binary(min_size=size, max_size=size))
                store.put(f"o{i}", blob)
                objects.append((store.ref(f"o{i}"), blob))
            for index, offset, size in reads:
                ref, blob = objects[index % len(objects)]
                expected = blob[offset:] if size is None else blob[offset : offset + size]
                assert cache.read(ref, offset, size) == expected
                for tier in cache.tiers:
                    assert tier.usage().used <= tier.usage().limit
    drop_memory_space(space)


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(0, 30), st.just(0)),
        st.tuples(st.just("get"), st.integers(0, 30), st.just(0)),
        st.tuples(st.just("pin"), st.integers(0, 30), st.just(0)),
        st.tuples(st.just("unpin"), st.integers(0, 30), st.just(0)),
        st.tuples(st.just("maintain"), st.just(0), st.just(0)),
        st.tuples(st.just("evict_to"), st.integers(0, 2000), st.just(0)),
    ),
    max_size=80,
)


@settings(max_examples=60, deadline=None)
@given(ops=OPS, policy=POLICY, budget=st.integers(400, 3000), on_disk=st.booleans())
def test_eviction_invariants_hold_against_a_model(ops, policy, budget, on_disk) -> None:
    pinned: set[PageKey] = set()
    with tempfile.TemporaryDirectory() as d:
        options = {"is_pinned": pinned.__contains__}
        if on_disk:
            tier = DiskTier(d, budget, make_policy(policy, budget), **options)
        else:
            tier = RamTier(budget, make_policy(policy, budget), **options)
        model: dict[PageKey, bytes] = {}  # what may be stored (a superset of what is)
        for op, n, _ in ops:
            key = PageKey("memory://m/o", "e", 4096, n)
            stored_pins = {k for k in pinned if tier.contains(k)}
            if op == "put":
                blob = bytes([n]) * (1 + n * 47 % 400)  # pages are immutable: one key, one content
                if tier.put(key, blob):
                    model[key] = blob
            elif op == "get":
                got = tier.get(key)
                assert got is None or got == model[key]
            elif op == "pin":
                pinned.add(key)
            elif op == "unpin":
                pinned.discard(key)
            elif op == "maintain":
                tier.maintain()
            else:
                tier.evict_to(n)
            usage = tier.usage()
            assert usage.used <= budget
            stored = {k for k in model if tier.contains(k)}
            assert usage.used == sum(len(model[k]) for k in stored) and usage.entries == len(stored)
            assert stored_pins - {key} <= stored or op == "unpin"  # pinned pages were not evicted
            for k in stored:
                assert tier.get(k) == model[k]
        tier.close()
