"""Faults: a flaky or slow origin, objects changed behind a snapshot, a full cache disk,
corrupt page files, and a process that died without closing the disk index."""

from __future__ import annotations

import errno
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from datahub.cache import DiskTier, assemble_cache, make_policy, open_cache
from datahub.cache.origin import Origin
from datahub.cache.pages import page_key
from datahub.config import load_config
from datahub.errors import ObjectChanged
from datahub.storage import StoreRegistry
from tests.cache.conftest import put_objects, with_cache
from tests.faults import FlakyProxy
from tests.tmpfs import small_tmpfs

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def s3_config(tmp_path: Path, moto_endpoint):
    config = load_config(
        env={}, overrides={"home": str(tmp_path / "var"), **moto_endpoint.s3_config_overrides()}
    )
    return with_cache(config, page_size=1024, ram_bytes=1 << 20, disk_bytes=1 << 20)


def seed_bucket(endpoint, config, sizes):
    bucket = endpoint.new_bucket("origin")
    with StoreRegistry(config) as registry:
        return put_objects(registry.store(f"s3://{bucket}/data"), sizes)


@pytest.mark.parametrize("fault", ["503", "slow"])
def test_flaky_or_slow_origin_reads_retry_and_return_correct_bytes(fault, s3_config, moto_endpoint) -> None:
    objects = seed_bucket(moto_endpoint, s3_config, [2500, 700])
    status, delay = (503, 0.0) if fault == "503" else (503, 2.0)
    with FlakyProxy(
        moto_endpoint.url, fail_first=2, status=status, delay=delay, match=lambda m, p: m == "GET"
    ) as proxy:
        config = s3_config.model_copy(
            update={
                "s3": s3_config.s3.model_copy(
                    update={"endpoint_url": proxy.url, "max_attempts": 4, "read_timeout": 0.5}
                )
            }
        )
        with StoreRegistry(config) as registry, open_cache(config, registry) as cache:
            for ref, data in objects:
                assert cache.read(ref) == data
            assert proxy.failed == 2
            assert cache.origin.counters.fetches == 4 and cache.origin.counters.errors == 0


def test_origin_that_keeps_failing_gives_a_clear_error_and_caches_nothing(s3_config, moto_endpoint) -> None:
    from datahub.errors import TransientStorageError

    [(ref, data)] = seed_bucket(moto_endpoint, s3_config, [100])
    with FlakyProxy(moto_endpoint.url, fail_first=100, match=lambda m, p: m == "GET") as proxy:
        config = s3_config.model_copy(
            update={"s3": s3_config.s3.model_copy(update={"endpoint_url": proxy.url, "max_attempts": 2})}
        )
        with StoreRegistry(config) as registry, open_cache(config, registry) as cache:
            with pytest.raises(TransientStorageError):
                cache.read(ref)
            assert all(t.usage().entries == 0 for t in cache.tiers)
            proxy.fail_more(-(100 - proxy.failed))  # the origin recovers
            assert cache.read(ref) == data


@pytest.mark.parametrize("where", ["local", "moto"])
def test_object_changed_behind_a_snapshot_never_mixes_bytes(
    where, make_cache, source, s3_config, moto_endpoint
) -> None:
    if where == "local":
        store, registry = source, None
        cache = make_cache(page_size=1024)
    else:
        registry = StoreRegistry(s3_config)
        store = registry.store(f"s3://{moto_endpoint.new_bucket('changed')}")
        cache = open_cache(s3_config, registry)
    [(ref, old)] = put_objects(store, [3000], seed=1)
    assert cache.read(ref, 0, 100) == old[:100]  # page 0 cached before the change
    store.put("obj/00000.bin", b"N" * 3000)  # replaced behind the snapshot: new etag
    with pytest.raises(ObjectChanged):
        cache.read(ref)
    with pytest.raises(ObjectChanged):
        cache.read(ref, 1024, 10)
    assert cache.read(ref, 0, 1024) == old[:1024]  # cached bytes are the snapshot's, still right
    if registry is not None:
        cache.close()
        registry.close()


@pytest.fixture
def tiny_tmpfs(tmp_path: Path):
    with small_tmpfs(tmp_path / "tiny", "2m") as mountpoint:
        yield mountpoint


def test_full_cache_disk_reads_fall_through_to_the_origin(tiny_tmpfs: Path, stores, source) -> None:
    objects = put_objects(source, [256 * 1024] * 8)
    # A frozen clock keeps the free-space limit measured before the ballast below, so the
    # tier really writes into a full file system and meets ENOSPC.
    disk = DiskTier(tiny_tmpfs, 1 << 30, make_policy("lru", 1 << 30), min_free_ratio=0.0, clock=lambda: 0.0)
    assert disk.limit() > 1024**2
    with assemble_cache([disk], Origin(stores), page_size=256 * 1024) as cache:
        fill_and_read(cache, disk, tiny_tmpfs, objects)


def fill_and_read(cache, disk, tiny_tmpfs: Path, objects) -> None:
    ballast = tiny_tmpfs / "ballast"
    with open(ballast, "wb") as fh:
        try:
            while True:
                fh.write(b"\0" * 64 * 1024)
                fh.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    for ref, data in objects:
        assert cache.read(ref) == data
    assert disk.counters.errors == len(objects)  # every store failed with ENOSPC, no read did
    assert disk.usage().used == 0
    assert not list((tiny_tmpfs / "tmp").iterdir())  # no half-written page left behind
    ballast.unlink()
    disk._limit_at = -1e18  # the disk has room again
    for ref, data in objects[:2]:
        assert cache.read(ref) == data
        assert cache.read(ref) == data
    assert disk.counters.hits == 2


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty"])
def test_corrupt_page_file_is_detected_removed_and_refetched(damage, make_cache, source, caplog) -> None:
    [(ref, data)] = put_objects(source, [2500])
    cache = make_cache()
    cache.read(ref)
    disk = cache.tiers[1]
    path = Path(disk._path(page_key(ref, 1024, 1)))
    cache.close()
    raw = bytearray(path.read_bytes())
    if damage == "flip":
        raw[-10] ^= 0xFF
    elif damage == "truncate":
        raw = raw[:-1]
    else:
        raw = bytearray()
    path.write_bytes(bytes(raw))
    again = make_cache()
    assert again.read(ref) == data
    disk = again.tiers[1]
    assert disk.counters.corrupt == 1 and disk.counters.misses == 1 and again.origin.counters.fetches == 1
    assert "corrupt" in caplog.text
    assert again.read(ref) == data and again.origin.counters.fetches == 1  # the refetched page is good


def test_index_is_rebuilt_after_a_process_died_holding_it(config, make_cache, source, caplog) -> None:
    objects = put_objects(source, [1500, 800])
    script = textwrap.dedent(
        f"""
        import os, sys
        sys.path.insert(0, {str(REPO)!r})
        from datahub.cache import open_cache
        from datahub.config import load_config
        from datahub.storage import StoreRegistry, ObjectRef
        config = load_config(env={{}}, overrides={{"home": {config.home!r}, "cache": {{"page_size": 1024}}}})
        cache = open_cache(config, StoreRegistry(config))
        for url, etag, size in {[(r.url, r.etag, r.size) for r, _ in objects]!r}:
            cache.read(ObjectRef(url, etag, size))
        os._exit(0)  # no close: the index still names this process as a holder
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    cache = make_cache(page_size=1024)
    assert "index rebuilt from 3 page files" in caplog.text
    for ref, data in objects:
        assert cache.read(ref) == data
    assert cache.origin.counters.fetches == 0
