"""packed43: a PackedDataset is bound to the shard copies it verified.

An open dataset's reader shared one LMDB handle per *path* in a process, so a dataset opened
after the local copy was fetched again (``PackedDataset.open`` found it changed and downloaded
it anew, renamed over the path) read the handle an earlier dataset had opened: the OLD file's
bytes. And a process opening a shard later (a DataLoader worker) opened whatever file was at
the path then, unverified.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.catalog import Catalog
from datahub.config import Config
from datahub.errors import ObjectChanged
from datahub.pack import PackSpec, pack
from datahub.torch import CacheSource
from tests.cache.test_fork25 import in_child
from tests.loader_workers import read_all
from tests.pack.conftest import packed_photos

N = 9


@pytest.fixture
def catalog(config: Config, tmp_path: Path) -> Iterator[Catalog]:
    with packed_photos(config, tmp_path, N) as cat:
        yield cat


def _raw(data, labels):
    return bytes(data), labels["class"]


def _open(config: Config, catalog: Catalog, cache_dir: Path):
    from datahub.torch import PackedDataset

    source = CacheSource(config)
    try:
        return PackedDataset.open(catalog, source, "photos-packed", cache_dir=cache_dir, transform=_raw)
    finally:
        source.close()


def _damage_in_place(path: Path, sample: bytes) -> None:
    """Another tool rewrites the copy in place: same inode and size, one byte of ``sample`` flipped."""
    data = bytearray(path.read_bytes())
    at = data.find(sample) + len(sample) // 2
    data[at] ^= 0xFF
    st = path.stat()
    with open(path, "r+b") as fh:
        fh.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_dataset_opened_after_a_refetch_reads_the_new_copy(
    config: Config, catalog: Catalog, tmp_path: Path
) -> None:
    cache_dir = tmp_path / "shards"
    first = _open(config, catalog, cache_dir)
    want = [first[i] for i in range(N)]  # every shard's handle open in this process
    path = first.readers[first.locate(0)[0]].path
    _damage_in_place(path, want[0][0])
    again = _open(config, catalog, cache_dir)  # the copy no longer matches: downloaded again
    assert hashlib.sha256(path.read_bytes()).hexdigest()[:32] == path.stem
    assert [again[i] for i in range(N)] == want  # it read the damaged file through first's handle


def test_a_copy_replaced_after_open_is_not_served_in_a_new_process(
    config: Config, catalog: Catalog, tmp_path: Path
) -> None:
    from datahub.torch import PackedDataset

    cache_dir = tmp_path / "shards"
    ds = _open(config, catalog, cache_dir)
    want = [ds[i] for i in range(N)]
    # a newer version of the pack (another size), opened from another directory
    pack(config, catalog, "photos", "photos-packed", PackSpec.parse(resize="40x30", shard_size="50KB"),
         workers=0)  # fmt: skip
    source = CacheSource(config)
    try:
        newer = PackedDataset.open(
            catalog, source, "photos-packed", 2, cache_dir=tmp_path / "v2", transform=_raw
        )
    finally:
        source.close()
    shard, key = ds.locate(0)
    path = ds.readers[shard].path
    replacement = newer.readers[newer.locate(0)[0]].path
    assert newer.locate(0)[1] == key and newer[0] != want[0]
    # the v1 copy is replaced by a rename over it with v2's shard of the same keys (a sync, a restore)
    tmp = path.with_name("x.tmp")
    tmp.write_bytes(replacement.read_bytes())
    os.replace(tmp, path)

    def child() -> bool:  # a forked DataLoader worker: opens its own handles
        try:
            got = [ds[i] for i in range(N)]
        except ObjectChanged as exc:
            return "photos-packed@v1" in exc.message and str(path) in exc.message
        return got == want

    assert in_child(child, timeout=120) == 0  # it read v2's bytes as v1's samples
    assert [ds[i] for i in range(N)] == want  # this process keeps the verified file's bytes


def test_a_copy_downloaded_again_is_read_in_a_new_process(
    config: Config, catalog: Catalog, tmp_path: Path
) -> None:
    cache_dir = tmp_path / "shards"
    ds = _open(config, catalog, cache_dir)
    want = [ds[i] for i in range(N)]
    for reader in ds.readers:  # removed (evicted) and fetched anew: the same bytes, other files
        reader.path.unlink()
    _open(config, catalog, cache_dir)
    assert in_child(lambda: [ds[i] for i in range(N)] == want, timeout=120) == 0


def test_a_copy_removed_after_open_is_a_clear_error_in_a_new_process(
    config: Config, catalog: Catalog, tmp_path: Path
) -> None:
    ds = _open(config, catalog, tmp_path / "shards")
    want = [ds[i] for i in range(N)]
    path = ds.readers[0].path
    path.unlink()  # evicted (a cleaner, a full disk's housekeeping), not fetched again

    def child() -> bool:
        try:
            [ds[i] for i in range(N)]
        except ObjectChanged as exc:
            return "shards/00000-of-" in exc.message and "open the dataset again" in exc.message
        return False

    assert in_child(child, timeout=120) == 0  # it was "cannot open shard …: No such file or directory"
    assert [ds[i] for i in range(N)] == want  # this process keeps the file it has open


def test_a_spawned_worker_is_bound_to_the_copies_as_well(
    config: Config, catalog: Catalog, tmp_path: Path
) -> None:
    from torch.utils.data import DataLoader

    ds = _open(config, catalog, tmp_path / "shards")
    want = [ds[i] for i in range(N)]
    loader = DataLoader(ds, batch_size=None, num_workers=1, multiprocessing_context="spawn")
    assert [tuple(s) for s in loader] == want  # the readers travel pickled, binding and all
    shard, _ = ds.locate(0)
    path, other = ds.readers[shard].path, ds.readers[(shard + 1) % len(ds.readers)].path
    tmp = path.with_name("x.tmp")
    tmp.write_bytes(other.read_bytes())
    os.replace(tmp, path)  # another shard's bytes renamed over the copy
    with pytest.raises(ObjectChanged, match="photos-packed@v1"):
        read_all(DataLoader(ds, batch_size=None, num_workers=1, multiprocessing_context="spawn"))
