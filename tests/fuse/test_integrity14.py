"""Adversarial reads through real mounts (integrity14): objects changed, deleted or replaced
by a prefix under a bucket mount, in every read mode, and a dataset version whose record no
longer matches its object. What a reader may get: the bytes of the version it mounted, or an
error (ESTALE for a changed object, ENOENT for a deleted one, EIO); never the new bytes and
never a mix (promise 2; docs/fuse.md, "Bucket snapshots"; docs/cache.md, "The read path").
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.catalog import open_catalog
from datahub.catalog.model import Put, Record
from datahub.errors import ObjectChanged
from datahub.storage import StoreRegistry
from datahub.storage.base import ObjectStore
from tests.fuse.conftest import FuseEnv, polled_stats, recorded_snapshot, upload_dataset
from tests.tmpfs import small_tmpfs

pytestmark = pytest.mark.fuse

MODES = {
    "auto": (),
    "passthrough": ("--passthrough",),
    "no-passthrough": ("--no-passthrough",),
    "no-fastread": ("--no-passthrough", "--no-fastread"),
    "no-cache": ("--no-cache",),
}


def _read_or_errno(path: Path) -> bytes | int:
    """The file's bytes through the mount, or the errno its open or read failed with."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        return exc.errno
    try:
        got = bytearray()
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return bytes(got)
            got += chunk
    except OSError as exc:
        return exc.errno
    finally:
        os.close(fd)


@contextlib.contextmanager
def _filled(env: FuseEnv, url: str, objects: dict[str, bytes]) -> Iterator[ObjectStore]:
    """The store of ``url`` (a bucket prefix), holding ``objects``, for the block."""
    with StoreRegistry(env.config) as stores:
        store = stores.store(url)
        for key, data in objects.items():
            store.put(key, data)
        yield store


def _same_size_other_bytes(rng: random.Random, old: bytes) -> bytes:
    new = bytearray(rng.randbytes(len(old)))
    new[0] = old[0] ^ 0xFF  # differs from the first byte on
    return bytes(new)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_objects_changed_under_a_bucket_mount_are_never_served_as_the_snapshot(
    env: FuseEnv, mode: str
) -> None:
    rng = random.Random(14)
    size_small, size_large = 50_000, 9 * 1024**2 + 5  # one page; three pages and a stream
    old = {
        "read/small.bin": rng.randbytes(size_small),  # read before the change: in the cache
        "read/large.bin": rng.randbytes(size_large),
        "cold/small.bin": rng.randbytes(size_small),  # never read before the change
        "cold/large.bin": rng.randbytes(size_large),
        "gone/deleted.bin": rng.randbytes(size_small),
        "gone/prefix": rng.randbytes(size_small),  # becomes "gone/prefix/inner" (a directory)
    }
    url = f"s3://{env.bucket}/data"
    with _filled(env, url, old) as store:
        mnt = env.mountpoint("bucket")
        with env.mounted(mnt, url, "--no-prefetch", *MODES[mode]):
            held = os.open(mnt / "read" / "large.bin", os.O_RDONLY)  # a handle open across the change
            try:
                assert os.pread(held, 4096, 0) == old["read/large.bin"][:4096]
                for key in ("read/small.bin", "read/large.bin"):
                    assert (mnt / key).read_bytes() == old[key]
                new = {key: _same_size_other_bytes(rng, data) for key, data in old.items()}
                for key in ("read/small.bin", "read/large.bin", "cold/small.bin", "cold/large.bin"):
                    store.put(key, new[key])
                store.delete("gone/deleted.bin")
                store.delete("gone/prefix")
                store.put("gone/prefix/inner", new["gone/prefix"])

                got = os.pread(held, size_large, 0)
                assert got == old["read/large.bin"] or got == old["read/large.bin"][: len(got)]
                for key in old:
                    result = _read_or_errno(mnt / key)
                    if key.startswith("read/"):  # cached under the snapshot's etag: its bytes
                        assert result == old[key], f"{key}: not the snapshot's bytes ({mode})"
                    elif key.startswith("cold/"):  # changed before any byte was read
                        assert result == errno.ESTALE, (key, result if isinstance(result, int) else "bytes")
                    else:  # deleted, or a directory now: gone
                        assert result == errno.ENOENT, (key, result if isinstance(result, int) else "bytes")
            finally:
                os.close(held)


def test_a_version_whose_object_was_overwritten_fails_the_read_and_logs_the_key(env: FuseEnv) -> None:
    """Someone overwrote the S3 object of a committed record with bytes of the same size:
    the version's file fails (ESTALE: the object changed behind the version), its
    neighbours read as committed, and the daemon's log names the object."""
    rng = random.Random(141)
    objects = {"train/ok.bin": rng.randbytes(70_000), "train/overwritten.bin": rng.randbytes(70_000)}
    objects["train/big.bin"] = rng.randbytes(6 * 1024**2 + 3)
    dataset = upload_dataset(env, "victim", objects)
    with StoreRegistry(env.config) as stores:
        store = stores.store(f"s3://{env.bucket}/data")
        for key in ("train/overwritten.bin", "train/big.bin"):
            store.put(key, _same_size_other_bytes(rng, objects[key]))
    mnt = env.mountpoint("ro")
    with env.mounted(mnt, f"{dataset.name}@{dataset.seq}"):  # warm-up on: it meets the change first
        root = mnt / dataset.name / f"v{dataset.seq}"
        assert (root / "train" / "ok.bin").read_bytes() == objects["train/ok.bin"]
        for key in ("train/overwritten.bin", "train/big.bin"):
            assert _read_or_errno(root / key) == errno.ESTALE, key
    log = (env.root / f"mount-{mnt.name}.log").read_text()
    assert "data/train/overwritten.bin" in log and "data/train/big.bin" in log


def test_objects_replaced_while_the_bucket_warm_up_runs_are_never_mixed_or_new(env: FuseEnv) -> None:
    """A warm-up under way (``--prefetch``) when every object is overwritten with bytes of
    the same size: each file reads whole as the snapshot had it, or fails with ESTALE."""
    rng = random.Random(1414)
    old = {f"w/{i:03d}.bin": rng.randbytes(rng.choice([3000, 70_000, 5 * 1024**2 + 1])) for i in range(24)}
    url = f"s3://{env.bucket}/warm"
    with _filled(env, url, old) as store:
        mnt = env.mountpoint("bucket")
        with env.mounted(mnt, url, "--prefetch"):
            # the mount lists the bucket while already live: once w/ lists whole, the index holds
            # the snapshot's etags (before, an overwrite that beat the listing was recorded, and
            # its new bytes were the snapshot's, failing this check under load)
            assert sorted(os.listdir(mnt / "w")) == sorted(k.removeprefix("w/") for k in old)
            for key, data in old.items():  # at once: the warm-up has just started
                store.put(key, _same_size_other_bytes(rng, data))
            for key, data in old.items():
                result = _read_or_errno(mnt / key)
                if isinstance(result, int):
                    assert result == errno.ESTALE, (key, errno.errorcode.get(result, result))
                else:
                    assert result == data, f"{key}: not the snapshot's bytes"


def test_a_cache_directory_that_fills_up_during_fills_never_costs_a_right_byte(
    env: FuseEnv, tmp_path: Path
) -> None:
    """The cache's file system runs out of space under the mount (another writer fills it
    after the disk tier measured its room): page files that no longer fit are refused, and
    every read, cold or warm, through passthrough and the daemon alike, is byte-exact."""
    rng = random.Random(4114)
    objects = {
        f"f/{i:03d}.bin": rng.randbytes(rng.choice([3000, 200_000, 3 * 1024**2 + 9])) for i in range(20)
    }
    url = f"s3://{env.bucket}/full"
    with _filled(env, url, objects):
        pass
    with small_tmpfs(tmp_path / "small", "16m") as cache_dir:
        mnt = env.mountpoint("bucket")
        with env.mounted(mnt, url, "--no-prefetch", "--cache-dir", str(cache_dir)):
            keys = sorted(objects)
            for key in keys[:4]:
                assert (mnt / key).read_bytes() == objects[key]
            ballast = cache_dir / "ballast"
            # fill what is left: the next fills meet ENOSPC
            with open(ballast, "wb") as fh, contextlib.suppress(OSError):
                while True:
                    fh.write(b"\0" * (1 << 20))
                    fh.flush()
            for _ in range(2):  # cold (ENOSPC), then again (what was refused is fetched again)
                for key in keys:
                    assert (mnt / key).read_bytes() == objects[key], key
            ballast.unlink()
            for key in keys:
                assert (mnt / key).read_bytes() == objects[key], key


def test_two_mounts_sharing_one_small_cache_directory_serve_only_right_bytes(env: FuseEnv) -> None:
    """Two bucket mounts (one in passthrough, one with READs in C) over one disk directory
    whose budget holds a few files: each mount evicts the page files the other has verified,
    published or holds open, while four readers go through both; every byte is checked, and
    handles opened before the evictions read right to the end."""
    text = env.config_path.read_text().replace("ram_bytes = 67108864", "ram_bytes = 262144")
    # [cache] is the config's last section; lru: every newcomer evicts
    env.config_path.write_text(text + 'disk_bytes = 1500000\npolicy = "lru"\n')
    rng = random.Random(4411)
    objects = {f"s/{i:03d}.bin": rng.randbytes(rng.choice([3000, 90_000, 400_000])) for i in range(40)}
    url = f"s3://{env.bucket}/shared"
    with _filled(env, url, objects):
        pass
    a, b = env.mountpoint("a"), env.mountpoint("b")
    with (
        env.mounted(a, url, "--no-prefetch", "--passthrough"),
        env.mounted(b, url, "--no-prefetch", "--no-passthrough"),
    ):
        keys = sorted(objects)
        held = {key: os.open(a / key, os.O_RDONLY) for key in keys[:5]}
        wrong: list[str] = []

        def reader(seed: int) -> None:
            r = random.Random(seed)
            for _ in range(120):
                key = r.choice(keys)
                root = r.choice((a, b))
                fd = os.open(root / key, os.O_RDONLY)
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # the next read reaches the files
                    if os.pread(fd, len(objects[key]) + 1, 0) != objects[key]:
                        wrong.append(f"{root.name}/{key}")
                finally:
                    os.close(fd)

        threads = [threading.Thread(target=reader, args=(seed,)) for seed in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        try:
            for key, fd in held.items():
                if os.pread(fd, len(objects[key]) + 1, 0) != objects[key]:
                    wrong.append(f"held {key}")
        finally:
            for fd in held.values():
                os.close(fd)
        assert wrong == []
        disk = next(t for t in polled_stats(env)["tiers"] if t["tier"] == "disk")
        assert disk["evictions"] > 0 and disk["hits"] > 0  # the race was run


def test_a_pinned_version_read_through_latest_never_gets_a_remounted_newer_versions_bytes(
    env: FuseEnv,
) -> None:
    """``VersionDataset.from_catalog(catalog, ds, 1, MountSource(MOUNT/ds/latest))``: the
    check sees ``latest -> v1`` and passes. The mount is then restarted (a CSI volume's
    daemon restarted, a script's remount) after version 2 was committed, so ``latest -> v2``:
    the dataset still holds version 1's records, and must read version 1's bytes or fail."""
    rng = random.Random(4141)
    v1 = {"x/a.bin": rng.randbytes(5000), "x/b.bin": rng.randbytes(7000)}
    dataset = upload_dataset(env, "pinned", v1)
    v2 = {key: _same_size_other_bytes(rng, data) for key, data in v1.items()}
    with StoreRegistry(env.config) as stores:
        store = stores.store(f"s3://{env.bucket}/data2")
        changes = [Put(Record(k, store.url_for(k), store.put(k, d).etag, len(d))) for k, d in v2.items()]
    mnt = env.mountpoint("ro")
    from datahub.torch import MountSource, VersionDataset  # here: torch's import only for this test

    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        with env.mounted(mnt, dataset.name):
            pinned = VersionDataset.from_catalog(
                catalog, dataset.name, 1, MountSource(mnt / dataset.name / "latest"), transform=lambda d, _: d
            )
            assert [pinned[i] for i in range(len(pinned))] == [v1[r.key] for r in pinned.records]
        catalog.commit(dataset.name, changes, message="v2")
        with env.mounted(mnt, dataset.name):  # the same mount point, mounted again: latest -> v2
            for i, record in enumerate(pinned.records):
                try:
                    got = pinned[i]
                except (OSError, ObjectChanged):  # refused: v1's directory is gone, or says so
                    continue
                assert got == v1[record.key], f"{record.key}: version 2's bytes under version 1's record"
    finally:
        catalog.close()


def test_a_pinned_bucket_snapshot_read_after_a_remount_never_gets_the_new_listings_bytes(
    env: FuseEnv,
) -> None:
    """A bucket mount's root shows one snapshot version and carries no version in its paths:
    mounted again after the objects changed, it shows a new snapshot at the same paths. A
    ``VersionDataset`` built on the first snapshot must refuse (ObjectChanged), never read
    the new objects' bytes under the old snapshot's records."""
    from datahub.torch import MountSource, VersionDataset  # here: torch's import only for this test

    rng = random.Random(4142)
    old = {"a.bin": rng.randbytes(5000), "d/b.bin": rng.randbytes(7000)}
    url = f"s3://{env.bucket}/snap"
    mnt = env.mountpoint("snap")
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        with _filled(env, url, old) as store:
            with env.mounted(mnt, url, "--no-prefetch"):
                [shown] = recorded_snapshot(mnt)
                name, _, version = shown.partition("@")
                pinned = VersionDataset.from_catalog(
                    catalog, name, int(version.removeprefix("v")), MountSource(mnt), transform=lambda d, _: d
                )
                assert [pinned[i] for i in range(len(pinned))] == [old[r.key] for r in pinned.records]
            for key, data in old.items():
                store.put(key, _same_size_other_bytes(rng, data))
            with env.mounted(mnt, url, "--no-prefetch"):
                assert recorded_snapshot(mnt) != [shown]
                for i in range(len(pinned)):
                    with pytest.raises(ObjectChanged):
                        pinned[i]
    finally:
        catalog.close()
