"""A local file replaced in place with its size and mtime kept (``cp -p`` over a same-size
file of an equal mtime, ``touch -r``, ``rsync -t``) is another version, never the old etag.

Why: the etag was ``<inode>-<size>-<mtime_ns>`` (or an md5 kept in an xattr next to size and
mtime), so such a replacement kept it; a conditional read passed and returned the new bytes
while the cache held pages of the old ones under that etag: a reader could get a file mixed
from both (promise 2). The ctime, which no user can set, is now part of the etag.
"""

from __future__ import annotations

import io
import os
import random
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hyp

from datahub.cache import open_cache
from datahub.catalog import open_catalog
from datahub.catalog.model import Put, Record
from datahub.config import Config
from datahub.errors import ObjectChanged
from datahub.ingest import import_source
from datahub.storage import LocalStore, StoreRegistry
from datahub.storage.base import ObjectRef
from tests.cache.conftest import with_cache


def replace_keeping_size_and_mtime(path: Path, data: bytes) -> None:
    """What ``cp -p new old`` does to an existing same-size ``old``: writes into the same
    inode, then sets the source's timestamps (here: the old file's own)."""
    st = os.stat(path)
    assert len(data) == st.st_size
    with open(path, "r+b") as fh:
        fh.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (st.st_ino, st.st_size, st.st_mtime_ns)


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    return LocalStore(tmp_path / "root")


@pytest.mark.parametrize("written_by", ["datahub", "another program"])
def test_a_replacement_keeping_size_and_mtime_changes_the_etag(store: LocalStore, written_by: str) -> None:
    path = store.root / "a.npy"
    if written_by == "datahub":
        store.put("a.npy", b"old bytes!")
    else:
        path.parent.mkdir(parents=True)
        path.write_bytes(b"old bytes!")
    before = store.stat("a.npy")
    replace_keeping_size_and_mtime(path, b"NEW BYTES!")
    assert store.stat("a.npy").etag != before.etag
    assert [i.etag for i in store.list()] == [store.stat("a.npy").etag]
    with pytest.raises(ObjectChanged) as exc:
        store.read("a.npy", 2, 6, etag=before.etag)
    assert "a.npy" in str(exc.value) and before.etag in str(exc.value) and "re-import" in str(exc.value)
    with pytest.raises(ObjectChanged):
        b"".join(store.read_chunks("a.npy", etag=before.etag))


def test_a_cached_read_of_an_imported_file_is_never_mixed_with_the_replacement(
    tmp_path: Path, config: Config
) -> None:
    """The defect end to end: import a directory, read part of a file through the cache,
    replace the file keeping size and mtime, read it whole: the old bytes or ObjectChanged."""
    src = tmp_path / "src"
    src.mkdir()
    rng = random.Random(3)
    old, new = rng.randbytes(10_000), rng.randbytes(10_000)
    (src / "x.bin").write_bytes(old)
    config = with_cache(config, page_size=1024, readahead_bytes=0)
    catalog = open_catalog(config.resolved_catalog_url)
    with StoreRegistry(config) as stores:
        import_source(catalog, config, stores, str(src), "ds")
        (record,) = catalog.list_records("ds", 1)
        ref = ObjectRef(record.url, record.etag, record.size)
        cache = open_cache(config, stores)
        try:
            assert cache.read(ref, 0, 2048) == old[:2048]  # two pages cached under the record's etag
            replace_keeping_size_and_mtime(src / "x.bin", new)
            try:
                got = bytes(cache.read(ref))
            except ObjectChanged as exc:
                assert "x.bin" in str(exc) and record.etag in str(exc)
            else:
                assert got == old, "a mix of the old and the new file was returned under the old etag"
        finally:
            cache.close()
    catalog.close()


REPLACEMENTS = ("in place", "truncate and write", "rename over", "delete and recreate")


def replace(path: Path, data: bytes, how: str, keep_mtime: bool) -> None:
    """Replace the file's content the way ``how`` says; with ``keep_mtime`` set its mtime back."""
    st = os.stat(path)
    if how == "in place":
        with open(path, "r+b") as fh:
            fh.write(data)
            fh.truncate(len(data))
    elif how == "truncate and write":
        path.write_bytes(data)
    elif how == "rename over":
        tmp = path.with_name(path.name + ".new")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    else:  # the inode number may come back for the new file
        path.unlink()
        path.write_bytes(data)
    if keep_mtime:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@given(
    old=hyp.binary(max_size=64),
    new=hyp.binary(max_size=64),
    same_size=hyp.booleans(),
    how=hyp.sampled_from(REPLACEMENTS),
    keep_mtime=hyp.booleans(),
)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_every_replacement_a_user_can_make_changes_the_etag(
    tmp_path: Path, old: bytes, new: bytes, same_size: bool, how: str, keep_mtime: bool
) -> None:
    """Whatever size, mtime and way of replacing (the same bytes again included): another etag,
    and a read under the old one is ObjectChanged."""
    if same_size:
        new = (new + bytes(len(old)))[: len(old)]
    with tempfile.TemporaryDirectory(dir=tmp_path) as root:
        store = LocalStore(root)
        store.put("f", old)
        before = store.stat("f")
        replace(Path(root) / "f", new, how, keep_mtime)
        after = store.stat("f")
        assert after.etag != before.etag
        with pytest.raises(ObjectChanged):
            store.read("f", etag=before.etag)
        assert store.read("f", etag=after.etag) == new


UNTOUCHING = ("stat", "list", "read", "read_chunks", "os.stat", "open and read", "listxattr", "scandir")


@given(ops=hyp.lists(hyp.sampled_from(UNTOUCHING), max_size=8), put=hyp.booleans())
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_file_nobody_touched_keeps_its_etag(tmp_path: Path, ops: list[str], put: bool) -> None:
    """Reads, stats and listings (atime updates included) never move the etag: a re-import of
    an unchanged tree sees no change."""
    with tempfile.TemporaryDirectory(dir=tmp_path) as root:
        store, path = LocalStore(root), Path(root) / "d" / "f"
        if put:
            first = store.put("d/f", b"content").etag
        else:
            path.parent.mkdir()
            path.write_bytes(b"content")
            first = store.stat("d/f").etag
        for op in ops:
            if op == "stat":
                store.stat("d/f")
            elif op == "list":
                list(store.list())
            elif op == "read":
                store.read("d/f", etag=first)
            elif op == "read_chunks":
                b"".join(store.read_chunks("d/f", etag=first, chunk_size=3))
            elif op == "os.stat":
                os.stat(path)
            elif op == "open and read":
                path.read_bytes()
            elif op == "listxattr":
                os.listxattr(path)
            else:
                list(os.scandir(path.parent))
        assert store.stat("d/f").etag == first
        assert [i.etag for i in store.list()] == [first]


def test_a_reimport_of_an_unchanged_tree_sees_no_change_and_a_chmod_is_a_change(
    tmp_path: Path, config: Config
) -> None:
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    for name in ("a/1.bin", "a/2.bin", "3.bin"):
        (src / name).write_bytes(name.encode() * 100)
    catalog = open_catalog(config.resolved_catalog_url)
    try:
        with StoreRegistry(config) as stores:
            assert import_source(catalog, config, stores, str(src), "ds").added == 3
            (record,) = [r for r in catalog.list_records("ds", 1) if r.key == "3.bin"]
            assert record.etag.count("-") == 3  # the form with the ctime
            again = import_source(catalog, config, stores, str(src), "ds")
            assert again.version is None and again.changed == 0
            os.chmod(src / "3.bin", 0o600)  # moves the ctime: recorded as modified (docs/storage.md)
            report = import_source(catalog, config, stores, str(src), "ds")
            assert (report.added, report.removed, report.modified) == (0, 0, 1)
    finally:
        catalog.close()


def test_a_reimport_records_a_file_of_an_older_record_once_in_the_new_form(
    tmp_path: Path, config: Config
) -> None:
    """A record taken before the ctime field (three fields) is read as before, and the next
    re-import records the file once as modified, in the form with the ctime."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.bin").write_bytes(b"older import")
    st = os.stat(src / "a.bin")
    older = f"{st.st_ino:x}-{st.st_size:x}-{st.st_mtime_ns:x}"
    catalog = open_catalog(config.resolved_catalog_url)
    try:
        catalog.create_dataset("ds")
        catalog.commit("ds", [Put(Record("a.bin", (src / "a.bin").as_uri(), older, st.st_size))])
        with StoreRegistry(config) as stores:
            store, key = stores.for_url((src / "a.bin").as_uri())
            assert store.read(key, etag=older) == b"older import"
            report = import_source(catalog, config, stores, str(src), "ds")
            assert (report.added, report.removed, report.modified) == (0, 0, 1)
            (record,) = catalog.list_records("ds", report.version.seq)
            assert record.etag == store.stat(key).etag and record.etag.count("-") == 3
            assert import_source(catalog, config, stores, str(src), "ds").version is None
    finally:
        catalog.close()


def test_a_stream_never_yields_bytes_written_after_it_opened(store: LocalStore) -> None:
    """The etag is checked at open and again after every chunk: a replacement in place while
    a stream reads (a write moves the ctime before it copies data) ends it with ObjectChanged
    before any of the new bytes are yielded."""
    old, new = b"a" * 4000, b"b" * 4000
    info = store.put("s", old)
    stream = store.read_chunks("s", etag=info.etag, chunk_size=1000)
    assert next(stream) == old[:1000]
    replace_keeping_size_and_mtime(store.root / "s", new)
    with pytest.raises(ObjectChanged):
        next(stream)


def test_a_read_racing_a_replacement_is_old_bytes_or_object_changed(store: LocalStore) -> None:
    """``read`` checks the etag again after its ``pread``: a write racing it moved the ctime
    before it copied data, so the read never returns bytes of the replacement."""
    old, new = b"o" * 256 * 1024, b"n" * 256 * 1024
    for _ in range(60):
        info = store.put("r", old)
        writer = threading.Thread(target=replace_keeping_size_and_mtime, args=(store.root / "r", new))
        writer.start()
        try:
            for _ in range(20):
                try:
                    assert store.read("r", etag=info.etag) == old
                except ObjectChanged:
                    break
        finally:
            writer.join()


def test_a_put_of_the_bytes_an_object_has_keeps_its_etag(tmp_path) -> None:
    """Content-addressed names put the same bytes under one key by design (two imports with
    --copy at once, test fixtures): the record taken from the first put must stay readable, as
    with S3's md5 etag. A put of other bytes of the same size is a new version."""
    store = LocalStore(tmp_path)
    first = store.put("blobs/ab", b"same bytes")
    again = store.put("blobs/ab", b"same bytes")
    assert again.etag == first.etag
    assert store.read("blobs/ab", etag=first.etag) == b"same bytes"
    other = store.put("blobs/ab", b"other byte")
    assert other.etag != first.etag
    with pytest.raises(ObjectChanged):
        store.read("blobs/ab", etag=first.etag)
    assert store.read("blobs/ab", etag=other.etag) == b"other byte"
    big = bytes(range(256)) * 9000  # more than one comparison chunk
    a = store.put("big", big)
    assert store.put("big", io.BytesIO(big)).etag == a.etag
    changed = bytearray(big)
    changed[-1] ^= 1
    assert store.put("big", bytes(changed)).etag != a.etag
    assert not [p for p in tmp_path.rglob("*") if p.name.startswith(".datahub")]  # no temp left
