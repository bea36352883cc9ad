"""Adversarial reads of the cache itself (integrity14): page files of the disk tier damaged,
replaced or deleted under a verified backing file; eviction racing many readers over tiny
budgets, with two caches sharing one disk directory; the tiers' byte accounting after it;
a FIFO (or a symlink to one) at a page file's name, which blocked a read, a passthrough open
and an index rebuild until a writer came.
What a reader may get: the object's bytes, never others (promise 2; docs/cache.md,
"Pages", "Backing files", "Processes sharing a cache directory").
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from datahub.cache import TieredCache, make_policy, open_cache
from datahub.cache.disk import DiskTier
from datahub.cache.pagefile import name_of
from datahub.cache.pages import PageKey, page_key
from datahub.cache.ram import RamTier
from datahub.catalog import open_catalog
from datahub.config import load_config
from datahub.errors import DatahubError, ObjectChanged
from datahub.fs import DatahubFileSystem
from datahub.ingest import import_source
from datahub.storage import StoreRegistry
from datahub.storage.base import ObjectRef, ObjectStore
from tests.cache.conftest import put_objects, wait_for, with_cache
from tests.cache.test_disk_writes import BUDGET, crash_after
from tests.faults import FlakyProxy
from tests.servers import S3Endpoint

PAGE = 4096


def _disk(cache: TieredCache) -> DiskTier:
    return next(t for t in cache.tiers if isinstance(t, DiskTier))


def _page_file(cache: TieredCache, ref: ObjectRef, index: int = 0) -> Path:
    disk = _disk(cache)
    return Path(disk._writer.pages_prefix) / name_of(page_key(ref, PAGE, index))


def _backing_bytes(cache: TieredCache, ref: ObjectRef) -> bytes | None:
    """What a passthrough open of ``ref`` would hand the kernel: the whole backing file, or
    None (no backing file: the open reads through the daemon)."""
    fd = cache.passthrough.fd(ref)
    if fd is None:
        return None
    try:
        return os.pread(fd, ref.size + PAGE, 0)
    finally:
        os.close(fd)


def _flip(path: Path) -> None:
    with open(path, "r+b") as fh:
        byte = fh.read(1)
        fh.seek(0)
        fh.write(bytes([byte[0] ^ 0x01]))


def _truncate(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def _extend(path: Path) -> None:
    with open(path, "ab") as fh:
        fh.write(b"tail")


def _symlink_to_other_page(other: Path) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        path.unlink()
        path.symlink_to(other)

    return damage


@pytest.mark.parametrize("damage", ["flip", "truncate", "extend", "symlink", "delete"])
def test_a_verified_backing_file_damaged_after_its_check_is_never_handed_out(
    make_cache: Callable[..., TieredCache], source: ObjectStore, damage: str
) -> None:
    cache = make_cache(page_size=PAGE, ram_bytes=0, disk_bytes=1024**2)
    (ref, data), (other_ref, other_data) = put_objects(source, [3000, 3000], seed=14)
    assert cache.read(ref) == data and cache.read(other_ref) == other_data
    assert _backing_bytes(cache, ref) == data  # verified (written from checked bytes)
    path = _page_file(cache, ref)
    {
        "flip": _flip,
        "truncate": _truncate,
        "extend": _extend,
        "symlink": _symlink_to_other_page(_page_file(cache, other_ref)),
        "delete": Path.unlink,
    }[damage](path)
    got = _backing_bytes(cache, ref)
    assert got is None or got == data, f"{damage}: a damaged backing file was handed out"
    assert cache.read(ref) == data
    assert cache.read(other_ref) == other_data  # the symlink's target is left alone
    assert _backing_bytes(cache, ref) in (None, data)


def _reader(
    caches: list[TieredCache], objects: list[tuple[ObjectRef, bytes]], seed: int, rounds: int, wrong: list
) -> None:
    rng = random.Random(seed)
    for _ in range(rounds):
        cache = rng.choice(caches)
        ref, data = rng.choice(objects)
        start = rng.randrange(0, ref.size)
        size = rng.randrange(1, 3 * PAGE)
        got = cache.read(ref, start, size)
        if got != data[start : start + size]:
            wrong.append((ref.url, start, size))


def _ram_bytes(tier: RamTier) -> int:
    return sum(len(v) for v in tier._data.values())


def _disk_bytes(tier: DiskTier) -> int:
    root = Path(tier._writer.pages_prefix)
    return sum(p.stat().st_size for p in root.rglob("*.page"))


def test_eviction_racing_many_readers_on_two_caches_of_one_directory_serves_only_right_bytes(
    make_cache: Callable[..., TieredCache], source: ObjectStore, tmp_path: Path
) -> None:
    shared_dir = str(tmp_path / "shared-disk")
    # budgets of a few pages against 60 objects of 1-4 pages: every read evicts something
    caches = [
        make_cache(page_size=PAGE, ram_bytes=6 * PAGE, disk_bytes=24 * PAGE, disk_dir=shared_dir)
        for _ in range(2)
    ]
    rng = random.Random(1414)
    objects = put_objects(source, [rng.randrange(1, 4 * PAGE) for _ in range(60)], seed=1414)
    wrong: list = []
    threads = [
        threading.Thread(target=_reader, args=(caches, objects, seed, 150, wrong)) for seed in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []
    for cache in caches:
        ram, disk = cache.tiers[0], _disk(cache)
        assert isinstance(ram, RamTier)
        # the maintenance thread may be between choosing victims and removing them: once it is
        # done, the count is the pages' bytes again (a drift never converges)
        wait_for(
            lambda r=ram: r.usage().used == _ram_bytes(r), what="the RAM tier's count to match its pages"
        )
        assert ram.usage().used <= ram.budget
        # pages the other cache stored are adopted on a hit without evicting: a budget shared
        # by processes holds after a maintenance round, not atomically (docs/cache.md)
        disk.maintain()
        assert disk.usage().used <= disk.high * disk.limit()
    # every page file left is a whole, verified page (what a later reader gets)
    for ref, data in objects:
        assert caches[0].read(ref) == data


def _returns(fn: Callable[[], object], unblock: Path) -> tuple[bool, object]:
    """(whether ``fn()`` returned within a minute, what it returned). A call still blocked
    then is released by opening the FIFO ``unblock`` for writing, so the test never hangs."""
    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(fn()), daemon=True)
    thread.start()
    thread.join(60)
    blocked = thread.is_alive()
    if blocked:
        os.close(os.open(unblock, os.O_WRONLY | os.O_NONBLOCK))  # a writer: the reader's open returns
        thread.join(60)
    return not blocked, result[0] if result else None


@pytest.mark.parametrize("how", ["fifo", "symlink-to-fifo"])
def test_a_page_file_replaced_by_a_fifo_never_blocks_a_read_or_an_open(
    make_cache: Callable[..., TieredCache], source: ObjectStore, tmp_path: Path, how: str
) -> None:
    """A FIFO at a page file's name (or a symlink to one) blocked the reader's ``open`` until
    some writer opened it: a cache read for ever, and a passthrough open for ever on the FUSE
    loop, which asks for a verified file inline (the whole mount then hangs). Page files are
    opened without following a symlink and without waiting: such a name is a miss, the page
    is fetched again and its file put back in place."""
    cache = make_cache(page_size=PAGE, ram_bytes=0, disk_bytes=1024**2)
    [(ref, data)] = put_objects(source, [3000], seed=141)
    assert cache.read(ref) == data and _backing_bytes(cache, ref) == data
    path, fifo = _page_file(cache, ref), tmp_path / "fifo"
    os.mkfifo(fifo)
    path.unlink()
    if how == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to(fifo)
    returned, fd = _returns(lambda: cache.passthrough.fd(ref, verify=False), path)  # the FUSE loop's ask
    if isinstance(fd, int) and fd >= 0:
        os.close(fd)
    assert returned, f"a passthrough open blocked on a {how} at the page file's name"
    returned, got = _returns(lambda: cache.read(ref), path)
    assert returned, f"a cache read blocked on a {how} at the page file's name"
    assert got == data
    assert path.is_file() and not path.is_symlink()  # fetched again, its file back in place
    assert _backing_bytes(cache, ref) == data


def test_an_index_rebuild_never_blocks_on_a_fifo_among_the_page_files(tmp_path: Path) -> None:
    """After a crash the index is rebuilt from the page files' headers: a FIFO among them
    (or a symlink to one) blocked that start for ever; it is removed as unreadable."""
    crash_after(tmp_path, "assert t.put(key(1), data(1))\nt.flush_index()")
    sub = tmp_path / "d" / "pages" / "00"
    sub.mkdir(exist_ok=True)
    fifo, link = sub / ("0" * 40 + ".page"), sub / ("1" * 40 + ".page")
    os.mkfifo(fifo)
    link.symlink_to(fifo)
    returned, rebuilt = _returns(
        lambda: DiskTier(str(tmp_path / "d"), BUDGET, make_policy("lru", BUDGET)), fifo
    )
    assert returned, "the index rebuild blocked on a FIFO among the page files"
    assert isinstance(rebuilt, DiskTier)
    try:
        assert not fifo.exists() and not link.is_symlink()
        assert rebuilt.get(PageKey("s3://bucket/obj1", "e", 1024, 0)) == bytes([1]) * 101
    finally:
        rebuilt.close()


class HeaderIgnored(FlakyProxy):
    """A real S3 server (moto) behind a proxy that drops one request header (``If-Match``,
    ``Range``): an endpoint that ignores it (an older S3-compatible server, a caching proxy)."""

    def __init__(self, upstream_url: str, header: str) -> None:
        self.header = header
        super().__init__(upstream_url)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        base, header = super()._handler_class(), self.header

        class Handler(base):  # type: ignore[valid-type, misc]
            def _forward(self, body: bytes) -> None:
                del self.headers[header]
                super()._forward(body)

        return Handler


@pytest.mark.parametrize("lean", [True, False], ids=["lean-get", "boto3-get"])
def test_an_origin_that_ignores_if_match_never_serves_another_objects_bytes(
    tmp_path: Path, moto_endpoint: S3Endpoint, lean: bool
) -> None:
    """The record's etag is the only thing tying a version to its bytes: every origin read
    sends it as If-Match. A server that ignored it answered 200 with the new object, and
    the cache served those bytes under the old etag (and kept them under its name). The
    answer's own ETag names the object it holds: a read whose answer names another one
    fails with ObjectChanged, as a 412 would."""
    bucket = moto_endpoint.new_bucket("ifmatch")
    base = load_config(
        env={}, overrides={"home": str(tmp_path / "var"), **moto_endpoint.s3_config_overrides()}
    )
    rng = random.Random(4141)  # not put_objects' seed: other bytes
    with StoreRegistry(base) as registry:
        store = registry.store(f"s3://{bucket}/data")
        objects = put_objects(store, [3000, 3 * PAGE + 5], seed=1414)
        for i, (_, data) in enumerate(objects):  # overwritten behind the records, same sizes
            store.put(f"obj/{i:05d}.bin", rng.randbytes(len(data)))
    with HeaderIgnored(moto_endpoint.url, "If-Match") as proxy:
        config = with_cache(
            base.model_copy(update={"s3": base.s3.model_copy(update={"endpoint_url": proxy.url})}),
            page_size=PAGE,
            ram_bytes=1 << 20,
            disk_bytes=1 << 20,
        )
        with StoreRegistry(config, lean_s3_get=lean) as registry, open_cache(config, registry) as cache:
            for ref, _ in objects:
                origin, key = registry.for_url(ref.url)
                with pytest.raises(ObjectChanged):
                    origin.read(key, 0, ref.size, etag=ref.etag)
                with pytest.raises(ObjectChanged):
                    list(origin.read_chunks(key, 0, ref.size, etag=ref.etag, chunk_size=1000))
                with pytest.raises(ObjectChanged):
                    cache.read(ref)
                with pytest.raises(ObjectChanged):
                    cache.read(ref, ref.size - 10, 10)  # the last page alone
    assert any(method == "GET" for method, _ in proxy.requests)  # the reads did reach the proxy


def test_a_pinned_version_read_through_datahub_fs_never_returns_a_newer_versions_bytes(
    tmp_path: Path, moto_endpoint: S3Endpoint
) -> None:
    """``datahub://ds@1/...`` while the objects are overwritten in place and re-imported as
    version 2 (an import by reference: both versions name the same URLs): a file open on
    version 1 and new reads of it give version 1's bytes or ObjectChanged, never version 2's;
    version 2 and ``latest`` give the new bytes."""
    bucket = moto_endpoint.new_bucket("pinned")
    config = with_cache(
        load_config(env={}, overrides={"home": str(tmp_path / "var"), **moto_endpoint.s3_config_overrides()}),
        page_size=PAGE,
        ram_bytes=1 << 20,
        disk_bytes=1 << 20,
    )
    rng = random.Random(1441)
    old = {"a.bin": rng.randbytes(5 * PAGE + 7), "b.bin": rng.randbytes(2000)}
    new = {key: rng.randbytes(len(data)) for key, data in old.items()}
    open_catalog(config.resolved_catalog_url).close()  # a reader never creates one (docs/cache.md)
    fs = DatahubFileSystem(config=config)
    try:
        with StoreRegistry(config) as stores:
            store = stores.store(f"s3://{bucket}/src")
            for key, data in old.items():
                store.put(key, data)
            import_source(fs.catalog, config, stores, f"s3://{bucket}/src", "pinned")
            held = fs.open("pinned@1/a.bin")
            assert held.read(PAGE) == old["a.bin"][:PAGE]
            for key, data in new.items():
                store.put(key, data)
            import_source(fs.catalog, config, stores, f"s3://{bucket}/src", "pinned")
        try:
            rest = held.read()
        except ObjectChanged:
            pass
        else:
            assert rest == old["a.bin"][PAGE:]
        for key in old:
            try:
                assert fs.cat_file(f"pinned@1/{key}") == old[key]
            except ObjectChanged:
                pass
            assert fs.cat_file(f"pinned@2/{key}") == new[key]
            assert fs.cat_file(f"pinned/{key}") == new[key]
    finally:
        fs.close()


@pytest.mark.parametrize("lean", [True, False], ids=["lean-get", "boto3-get"])
def test_an_origin_that_ignores_range_never_serves_bytes_from_another_offset(
    tmp_path: Path, moto_endpoint: S3Endpoint, lean: bool
) -> None:
    """A server may ignore ``Range`` and answer 200 with the whole object. ``read_chunks``
    (what the cache's streams read through) yielded the object's first bytes as the bytes
    from its start, and ``read`` returned the whole object for a range from 0. An answer to
    a ranged GET must be that range (206 and its ``Content-Range``, or a 200 that is exactly
    the slice), else the read fails; never bytes of another offset. (The sequential read
    through the cache below held before the change too: its length checks caught it.)"""
    bucket = moto_endpoint.new_bucket("range")
    base = load_config(
        env={}, overrides={"home": str(tmp_path / "var"), **moto_endpoint.s3_config_overrides()}
    )
    with StoreRegistry(base) as registry:
        [(ref, data)] = put_objects(registry.store(f"s3://{bucket}/data"), [6 * PAGE + 5], seed=4)
    with HeaderIgnored(moto_endpoint.url, "Range") as proxy:
        config = base.model_copy(update={"s3": base.s3.model_copy(update={"endpoint_url": proxy.url})})
        with StoreRegistry(config, lean_s3_get=lean) as registry:
            origin, key = registry.for_url(ref.url)
            for start, end in ((PAGE, 3 * PAGE), (2 * PAGE, ref.size), (0, PAGE)):
                got = b""
                with contextlib.suppress(DatahubError):
                    for chunk in origin.read_chunks(key, start, end, etag=ref.etag, chunk_size=1000):
                        got += chunk
                assert got == data[start : start + len(got)], f"bytes of another offset for [{start}, {end})"
                with contextlib.suppress(DatahubError):
                    assert origin.read(key, start, end, etag=ref.etag) == data[start:end]
        # a sequential reader through the cache: streams and read-ahead runs, pages kept
        cached = with_cache(
            config,
            page_size=PAGE,
            ram_bytes=1 << 20,
            disk_bytes=1 << 20,
            stream_min_bytes=PAGE,
            readahead_bytes=4 * PAGE,
        )
        with StoreRegistry(cached, lean_s3_get=lean) as registry, open_cache(cached, registry) as cache:
            for _ in range(2):  # the second pass reads what the first one kept
                for offset in range(0, ref.size, 1000):
                    with contextlib.suppress(DatahubError):
                        assert cache.read(ref, offset, 1000) == data[offset : offset + 1000], offset
    assert any(method == "GET" for method, _ in proxy.requests)
