"""PackedDataset's local shard copies: reused only while the stamp of their verification still
matches the file; a copy changed in place (same size) was served as it was, wrong samples and all."""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.catalog import Catalog, Record
from datahub.config import Config
from datahub.torch import CacheSource
from tests.pack.conftest import packed_photos

N = 9


class CountingSource:
    """A CacheSource that counts the shard bytes read through it."""

    def __init__(self, inner) -> None:
        self.inner, self.shard_reads = inner, 0

    def read(self, record: Record, offset: int = 0, size: int | None = None) -> bytes:
        if record.key != "index.json":
            self.shard_reads += 1
        return self.inner.read(record) if size is None else self.inner.read(record, offset, size)


@pytest.fixture
def catalog(config: Config, tmp_path: Path) -> Iterator[Catalog]:
    with packed_photos(config, tmp_path, N) as cat:
        yield cat


def _raw(data, labels):
    return bytes(data), labels["class"]


def _open(config: Config, catalog: Catalog, cache_dir: Path):
    from datahub.torch import PackedDataset

    source = CountingSource(CacheSource(config))
    try:
        ds = PackedDataset.open(catalog, source, "photos-packed", cache_dir=cache_dir, transform=_raw)
    finally:
        source.inner.close()
    return ds, source.shard_reads


def _sha(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_copy_changed_in_place_is_never_served(
    config: Config, catalog: Catalog, tmp_path: Path, caplog
) -> None:
    cache_dir = tmp_path / "shards"
    first, reads = _open(config, catalog, cache_dir)
    want = [first[i] for i in range(N)]
    assert reads > 0
    copies = {_sha(p): p for p in cache_dir.glob("*.lmdb")}
    checksums = {
        r.key: r.checksum for r in catalog.list_records("photos-packed", None) if r.key != "index.json"
    }
    assert set(copies) == set(checksums.values())  # every copy as recorded

    again, reads = _open(config, catalog, cache_dir)  # stamps match: no byte read again
    assert reads == 0 and [again[i] for i in range(N)] == want

    # another tool rewrites one copy in place: same size, one byte of sample 0's picture changed
    path = first.readers[first.locate(0)[0]].path
    for reader in first.readers + again.readers:  # a new process would not share their handles
        reader.close()
    data = bytearray(path.read_bytes())
    at = data.find(want[0][0]) + len(want[0][0]) // 2
    data[at] ^= 0xFF
    st = path.stat()
    with open(path, "r+b") as fh:  # in place: same inode, same size
        fh.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # and its mtime put back
    assert path.stat().st_size == st.st_size and path.stat().st_ino == st.st_ino

    with caplog.at_level(logging.WARNING, logger="datahub.torch.datasets"):
        fixed, reads = _open(config, catalog, cache_dir)
    assert [fixed[i] for i in range(N)] == want  # the right samples, not the changed bytes
    assert _sha(path) in checksums.values() and reads > 0  # downloaded again
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "photos-packed@v1" in warned[0] and "shards/" in warned[0]


def test_a_copy_without_a_stamp_is_verified_once_and_kept(
    config: Config, catalog: Catalog, tmp_path: Path
) -> None:
    cache_dir = tmp_path / "shards"
    _open(config, catalog, cache_dir)
    inodes = {p.name: p.stat().st_ino for p in cache_dir.glob("*.lmdb")}
    for stamp in cache_dir.glob("*.verified"):  # copies made before stamps existed
        stamp.unlink()
    ds, reads = _open(config, catalog, cache_dir)
    assert (
        reads == 0 and {p.name: p.stat().st_ino for p in cache_dir.glob("*.lmdb")} == inodes
    )  # hashed, kept
    assert len(list(cache_dir.glob("*.verified"))) == len(inodes) and len(ds) == N


class BytesSource:
    def __init__(self, data: bytes) -> None:
        self.data, self.reads = data, 0

    def read(self, record: Record, offset: int = 0, size: int | None = None) -> bytes:
        self.reads += 1
        return self.data[offset : offset + (len(self.data) if size is None else size)]


def test_a_record_without_a_sha256_is_reused_only_while_its_stamp_matches(tmp_path: Path) -> None:
    from datahub.torch.datasets import _local_copy

    good = os.urandom(4096)
    record = Record("shards/00000.lmdb", "s3://b/x", "etag-1", len(good))  # no checksum
    source = BytesSource(good)
    path = _local_copy(source, record, tmp_path, "raw@v1")
    assert path.read_bytes() == good and source.reads == 1
    assert _local_copy(source, record, tmp_path, "raw@v1") == path and source.reads == 1  # reused
    with open(path, "r+b") as fh:  # changed in place, same size
        fh.write(b"\0" * 16)
    assert _local_copy(source, record, tmp_path, "raw@v1").read_bytes() == good and source.reads == 2
    path.unlink()
    path.write_bytes(bytes(len(good)))  # another file of that name and size, no stamp of its own
    assert _local_copy(source, record, tmp_path, "raw@v1").read_bytes() == good and source.reads == 3
