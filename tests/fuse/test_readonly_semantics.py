"""The rows of docs/semantics.md's read-only table that no test named: `readlink`, `statfs`,
the `stat` fields beyond mode and times (symlinks, `st_blksize`, `st_nlink`), `mmap` reads and
the ENOENT of an object deleted behind the version, each on a real read-only mount (the
sample dataset's module-scoped ``ro_mount``, or a dataset of the test's own)."""

from __future__ import annotations

import errno
import mmap
import os
import stat
from pathlib import Path

import pytest

from datahub.storage import StoreRegistry
from tests.fuse.conftest import Dataset, FuseEnv, upload_dataset

pytestmark = pytest.mark.fuse


def test_readlink_of_the_ref_symlink_names_the_version(ro_mount: Path, sample: Dataset) -> None:
    link = ro_mount / "sample" / "latest"
    assert os.readlink(link) == f"v{sample.seq}"
    assert (link / "README.txt").read_bytes() == sample.objects["README.txt"]


def test_stat_fields_of_symlinks_block_size_and_links(ro_mount: Path, sample: Dataset) -> None:
    root = ro_mount / "sample" / f"v{sample.seq}"
    link = os.lstat(ro_mount / "sample" / "latest")
    assert stat.S_ISLNK(link.st_mode) and stat.S_IMODE(link.st_mode) == 0o777
    assert (link.st_uid, link.st_gid) == (os.getuid(), os.getgid())
    f = (root / "README.txt").stat()
    assert f.st_blksize == 1024 * 1024
    assert f.st_nlink == 1
    assert f.st_size == len(sample.objects["README.txt"])
    d = (root / "train").stat()
    assert d.st_nlink == 2


def test_statfs_counts_the_files_and_no_blocks(ro_mount: Path, sample: Dataset) -> None:
    """``f_files``: the mount's own entries (root, dataset, versions, ref symlinks) and the
    version's files, its records; the version's directories are paged from the catalog
    (docs/fuse.md, "The namespace of a version mount") and not counted."""
    top = 1 + len(os.listdir(ro_mount)) + len(os.listdir(ro_mount / "sample"))
    s = os.statvfs(ro_mount)
    assert s.f_files == top + len(sample.objects)
    assert (s.f_blocks, s.f_bfree, s.f_bavail) == (0, 0, 0)


def test_mmap_reads_are_byte_exact(ro_mount: Path, sample: Dataset) -> None:
    key = max(sample.objects, key=lambda k: len(sample.objects[k]))  # several pages
    data = sample.objects[key]
    path = ro_mount / "sample" / f"v{sample.seq}" / key
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
        assert len(m) == len(data)
        assert m[:] == data
        middle = len(data) // 2
        assert m[middle : middle + 4097] == data[middle : middle + 4097]


def test_an_object_deleted_behind_the_version_reads_enoent(env: FuseEnv) -> None:
    """The read is conditional on the recorded object: one deleted from the bucket after the
    commit answers ENOENT (never other bytes), and its neighbours still read."""
    objects = {"a.bin": b"a" * 5000, "b.bin": b"b" * 7000}
    ds = upload_dataset(env, "gone", objects)
    with StoreRegistry(env.config) as stores:
        stores.store(f"s3://{env.bucket}/data").delete("a.bin")
    mnt = env.mountpoint("gone")
    with env.mounted(mnt, "gone", "--no-prefetch"):  # the read is the first to ask for it
        root = mnt / "gone" / f"v{ds.seq}"
        with pytest.raises(OSError) as exc:
            (root / "a.bin").read_bytes()
        assert exc.value.errno == errno.ENOENT
        assert (root / "b.bin").read_bytes() == objects["b.bin"]
