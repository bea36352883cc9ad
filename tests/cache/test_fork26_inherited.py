"""fork26: reading through a ``TieredCache`` a forked child inherited (not through datahub://).

Code that holds the cache itself (``open_cache`` in the parent, the object kept by a Dataset)
and reads through it in a DataLoader worker read with the parent's machinery: a page a parent
thread was fetching at the fork was waited for in its single flight, whose leader does not
exist in the child (the read hung); the child also used the parent's LMDB handle, scheduler
slots and pooled connections. In a child the cache now reads through a cache of the child's
own, opened from the same configuration on first use, and closed with the inherited one.
"""

from __future__ import annotations

import os
import threading

from datahub.cache.index import _HOLDER
from tests.cache.conftest import hold_parent_reads, put_objects
from tests.cache.test_fork25 import in_child


def _holders(cache) -> set[int]:
    index = next(t for t in cache.tiers if t.name == "disk").index
    with index._env.begin(db=index._meta) as txn:
        return {int(k[len(_HOLDER) :]) for k, _ in txn.cursor() if k.startswith(_HOLDER)}


def test_a_child_reads_through_an_inherited_cache_while_the_parent_fetches(make_cache, source, monkeypatch):
    cache = make_cache()
    (held, held_data), (other, other_data), (warm, warm_data) = put_objects(source, [3000, 2500, 1500])
    assert cache.read(warm) == warm_data  # open, and a page in every tier
    parent = os.getpid()
    arrived, gate = hold_parent_reads(monkeypatch)
    got: list[bytes] = []
    fetcher = threading.Thread(target=lambda: got.append(cache.read(held)))
    fetcher.start()
    try:
        assert arrived.wait(60)

        def child() -> bool:
            ok = cache.read(held) == held_data  # the page the parent is fetching
            ok = ok and cache.read(other) == other_data and cache.read(warm, 100, 200) == warm_data[100:300]
            cache.close()  # in a child: closes the child's own cache (its claim on the index)
            return ok

        outcome = in_child(child, timeout=60)
    finally:
        gate.set()
        fetcher.join(60)
    assert outcome == 0, f"child: {outcome}"
    assert got == [held_data]
    assert _holders(cache) == {parent}, "the child's claim outlived it, or the parent's is gone"
    assert cache.read(other) == other_data


def test_a_cache_built_from_tiers_refuses_a_read_in_a_forked_child(tmp_path, source) -> None:
    """``assemble_cache`` has no configuration to open the child's own cache from: a read in a
    child says so (InvalidInput naming open_cache and CacheSource) instead of using the
    parent's parts."""
    from datahub.errors import InvalidInput
    from tests.cache.conftest import gated_cache

    cache, _ = gated_cache(tmp_path, source)
    (ref, data), *_ = put_objects(source, [1500])
    try:
        assert cache.read(ref) == data

        def child() -> bool:
            try:
                cache.read(ref)
            except InvalidInput as exc:
                return "open_cache" in str(exc) and "CacheSource" in str(exc)
            return False

        assert in_child(child, timeout=60) == 0
        assert cache.read(ref) == data
    finally:
        cache.close()
