"""Adversarial reads through real mounts (integrity15).

- A page file of the SSD tier damaged while mounted in the ways a flipped byte does not
  cover: a hole punched in it (zeros, same size), bytes appended, cut short, or the file
  replaced by another object's valid page file. In the default read mode the file is
  published to pyfuse3's C READ path; with ``--passthrough`` the kernel reads it. What a
  reader may get from a new open: the version's bytes (promise 2; docs/cache.md, "Backing
  files"; fuse_adapter/fastread.py).
- A version whose record claims fewer bytes than its object holds (same URL, same etag): the
  file fails (ESTALE) in every read mode, never reads as the object's first bytes
  (docs/cache.md, "The read path").
"""

from __future__ import annotations

import ctypes
import errno
import os
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from datahub.catalog import open_catalog
from datahub.catalog.model import Put, Record
from datahub.storage import StoreRegistry
from tests.fuse.conftest import Dataset, FuseEnv, polled_mount, polled_stats, upload_dataset, wait_until
from tests.fuse.test_fastread import forget_pages, published, read_buffered
from tests.fuse.test_integrity14 import MODES, _read_or_errno
from tests.fuse.test_passthrough import FILES, GUARD, mount_stats, page_file_of, warm_into_disk

pytestmark = pytest.mark.fuse

_FALLOC_FL_KEEP_SIZE, _FALLOC_FL_PUNCH_HOLE = 0x01, 0x02


def _punch_hole(path: Path, other: Path) -> None:
    """Zeros over the file's second 4 KiB, its size and every other byte kept."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    fd = os.open(path, os.O_WRONLY)
    try:
        if libc.fallocate(fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, 4096, 4096) != 0:
            err = ctypes.get_errno()
            pytest.skip(f"the cache's file system cannot punch holes: {os.strerror(err)}")
    finally:
        os.close(fd)


def _append(path: Path, other: Path) -> None:
    with open(path, "ab") as f:
        f.write(b"appended")


def _cut(path: Path, other: Path) -> None:
    os.truncate(path, path.stat().st_size - 1)


def _replaced(path: Path, other: Path) -> None:
    """Another object's page file, valid for its own key, renamed over this one's name."""
    copy = path.with_suffix(".swap")
    copy.write_bytes(other.read_bytes())
    os.setxattr(copy, "user.datahub.page", os.getxattr(other, "user.datahub.page"))
    os.rename(copy, path)


DAMAGE: dict[str, Callable[[Path, Path], None]] = {
    "hole": _punch_hole,
    "append": _append,
    "cut": _cut,
    "replaced": _replaced,
}


@pytest.fixture
def files(env: FuseEnv) -> Dataset:
    return upload_dataset(env, "i15", FILES)


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_published_page_file_damaged_while_mounted_is_never_read_in_c(
    env: FuseEnv, files: Dataset, damage: str
) -> None:
    """Default read mode: every file published to the C READ path, then damaged; the next READ
    of each (the kernel's pages dropped) gives the version's bytes."""
    mnt = env.mountpoint("i15c")
    with env.mounted(mnt, "i15", "--no-passthrough"):
        root = mnt / "i15" / f"v{files.seq}"
        published(env, root)
        keys = list(FILES)
        victims = keys[:4]
        for i, key in enumerate(victims):
            DAMAGE[damage](page_file_of(env, FILES[key]), page_file_of(env, FILES[keys[-1 - i]]))
        forget_pages(root, FILES)
        assert {key: read_buffered(root / key) for key in FILES} == FILES
        wait_until(lambda: mount_stats(env)["page_files_changed"] >= len(victims), GUARD)


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_verified_backing_file_damaged_while_mounted_is_never_handed_to_a_new_open(
    env: FuseEnv, files: Dataset, damage: str
) -> None:
    """``--passthrough``: every file verified and handed to the kernel once, then damaged;
    each new open (read and pread past the end) gives the version's bytes."""
    mnt = env.mountpoint("i15p")
    with env.mounted(mnt, "i15", "--passthrough"):
        root = mnt / "i15" / f"v{files.seq}"
        warm_into_disk(env, root)
        for key, data in FILES.items():
            assert (root / key).read_bytes() == data
        wait_until(lambda: polled_mount(env).get("passthrough_opens", 0) >= len(FILES), GUARD)
        keys = list(FILES)
        victims = keys[:4]
        for i, key in enumerate(victims):
            DAMAGE[damage](page_file_of(env, FILES[key]), page_file_of(env, FILES[keys[-1 - i]]))
        for key, data in FILES.items():
            fd = os.open(root / key, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                assert os.pread(fd, len(data) + 100, 0) == data, key
            finally:
                os.close(fd)
        wait_until(
            lambda: sum(b["rejected"] for b in polled_stats(env)["backing_files"]) >= len(victims), GUARD
        )


@pytest.mark.parametrize("mode", sorted(MODES))
def test_a_record_shorter_than_its_object_fails_the_read_in_every_mode(env: FuseEnv, mode: str) -> None:
    """A version whose record of a 6 MiB object (two 4 MiB pages) claims 5 MiB + 1 bytes under
    the object's own URL and etag, as any writer whose sources allow the URL can commit over
    HTTP: before, its open and read returned the object's first 5 MiB + 1 bytes with no
    error; now the read fails with ESTALE, and a record that names the object whole reads."""
    rng = random.Random(15)
    objects = {"train/ok.bin": rng.randbytes(70_000), "train/long.bin": rng.randbytes(6 * 1024**2 + 3)}
    whole = upload_dataset(env, "whole", objects)
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        record = catalog.get_record(whole.name, str(whole.seq), "train/long.bin")
        short = Record(record.key, record.url, record.etag, 5 * 1024**2 + 1)
        catalog.create_dataset("short")
        seq = catalog.commit("short", [Put(short)], message="a size shorter than the object").seq
    finally:
        catalog.close()
    mnt = env.mountpoint("short")
    with env.mounted(mnt, "short", "whole", *MODES[mode]):
        assert _read_or_errno(mnt / "short" / f"v{seq}" / "train" / "long.bin") == errno.ESTALE
        got = _read_or_errno(mnt / "whole" / f"v{whole.seq}" / "train" / "long.bin")
        assert got == objects["train/long.bin"]


#: keys that only differ in ways a file system or a path parser might fold: Unicode
#: normalisation (NFC, NFD), case, a file and a directory of one name with a marker object,
#: a doubled slash, dot segments, a 255-byte name and a longer one
TWINS = [
    "uni/caf\u00e9.bin",
    "uni/cafe\u0301.bin",
    "case/A.bin",
    "case/a.bin",
    "both/a",
    "both/a/",
    "both/a/inner.bin",
    "dbl//x.bin",
    "dbl/x.bin",
    "dot/./x.bin",
    "dot/../x.bin",
    "dot/x.bin",
    "long/" + "n" * 251 + ".bin",
    "long/" + "m" * 300 + ".bin",
]


@pytest.mark.parametrize("listing", ["whole", "by-directory"])
def test_bucket_keys_that_differ_only_in_normalisation_case_or_slashes_each_read_their_own_bytes(
    env: FuseEnv, monkeypatch: pytest.MonkeyPatch, listing: str
) -> None:
    """A bucket mount shows each key as a path, or not at all (counted as skipped): every file
    it shows reads the bytes of the object whose key is exactly that path, both twins of a
    pair that differ only in Unicode normalisation or case are shown, and no key is shown under
    another's path (``a`` and ``a/`` and ``a/inner``, ``dbl//x`` and ``dbl/x``, ``dot/../x``),
    whether the bucket is listed whole or directory by directory. Listed by directory, ``both``
    (``a``, ``a/``, ``a/inner.bin``) read as an empty directory: the whole listing had stopped
    after ``both/a``, so that shadowed file was its only final child and the readdir answered
    no entry, which ends a directory (``ListingTree.readdir``)."""
    rng = random.Random(1515)
    objects = {key: rng.randbytes(1000 + i) for i, key in enumerate(TWINS)}
    url = f"s3://{env.bucket}/twins-{listing}"
    if listing == "by-directory":  # more keys than this: each directory is listed by itself
        monkeypatch.setenv("DATAHUB_CACHE_BUCKET_LIST_WHOLE_OBJECTS", "2")
    with StoreRegistry(env.config) as stores:
        store = stores.store(url)
        for key, data in objects.items():
            store.put(key, data)
    mnt = env.mountpoint("twins")
    with env.mounted(mnt, url, "--no-prefetch"):
        # first thing: a directory listed by itself whose first key is a file shadowed by a
        # directory of its name (``both/a`` then ``both/a/``) listed as empty before
        assert sorted(os.listdir(mnt / "both")) == ["a"]
        shown = {
            os.path.relpath(os.path.join(d, f), mnt): Path(d, f).read_bytes()
            for d, _, names in os.walk(mnt)
            for f in names
        }
    assert shown, "the mount shows no file"
    for path, data in shown.items():
        assert path in objects and data == objects[path], path[:80]
    for pair in (TWINS[0:2], TWINS[2:4]):
        assert all(key in shown for key in pair), pair
    assert "both/a/inner.bin" in shown and "dbl/x.bin" in shown and "dot/x.bin" in shown
