"""review24: an object overwritten in S3 while a reader holds it open through a bucket mount,
part read, is never read as a mix of the two objects (promise 2).

The reader opens a file of the bucket snapshot and reads its first pages; another S3 client
(boto3, as any writer of the bucket) overwrites the object (same size, shorter, longer);
the reader goes on reading from the same descriptor. What it may get: the snapshot's bytes
whole, or the snapshot's bytes up to some offset and then an error (ESTALE: the object
changed behind the snapshot); never the new object's bytes after the old ones. A file
opened afresh afterwards is the same. In every read mode, with the mount's readahead and
without it (then the pages after the first read are surely fetched after the overwrite).
"""

from __future__ import annotations

import errno
import os
import random
import threading

import pytest

from tests.fuse.conftest import FuseEnv
from tests.fuse.test_integrity14 import MODES

pytestmark = pytest.mark.fuse

PAGE = 65536  # small pages: the first read leaves most of each file unfetched
SIZE = 40 * PAGE + 123
FIRST = PAGE + 1000  # read before the overwrite: the first two pages


def _rest(fd: int, start: int, old: bytes, what: str) -> tuple[int, int | None]:
    """Read ``fd`` from ``start`` to its end in odd-sized chunks: (bytes read, errno or None),
    asserting every byte read is the snapshot's ``old``."""
    offset = start
    while True:
        try:
            chunk = os.pread(fd, 3 * PAGE + 17, offset)
        except OSError as exc:
            return offset, exc.errno
        if not chunk:
            return offset, None
        assert chunk == old[offset : offset + len(chunk)], (
            f"{what}: bytes {offset}..{offset + len(chunk)} are not the snapshot's: the mount mixed "
            "the old and the new object"
        )
        offset += len(chunk)


@pytest.mark.parametrize("readahead", ["none", "default"])
@pytest.mark.parametrize("mode", sorted(MODES))
def test_an_object_overwritten_while_open_mid_read_is_old_bytes_or_estale(
    env: FuseEnv, mode: str, readahead: str
) -> None:
    settings = f"page_size = {PAGE}\n" + ("readahead_bytes = 0\n" if readahead == "none" else "")
    with open(env.config_path, "a") as fh:  # [cache] is the config's last section
        fh.write(settings)
    rng = random.Random(24)
    old = {name: rng.randbytes(SIZE) for name in ("same.bin", "shorter.bin", "longer.bin")}
    new = {
        "same.bin": bytes(b ^ 0x5A for b in old["same.bin"]),
        "shorter.bin": rng.randbytes(SIZE // 2),
        "longer.bin": rng.randbytes(SIZE * 2),
    }
    client = env.endpoint.client()
    for name, data in old.items():
        client.put_object(Bucket=env.bucket, Key=f"ow/{name}", Body=data)
    mnt = env.mountpoint("bucket")
    with env.mounted(mnt, f"s3://{env.bucket}/ow", "--no-prefetch", *MODES[mode]):
        held = {name: os.open(mnt / name, os.O_RDONLY) for name in old}
        try:
            for name, fd in held.items():
                assert os.pread(fd, FIRST, 0) == old[name][:FIRST]
            for name, data in new.items():
                client.put_object(Bucket=env.bucket, Key=f"ow/{name}", Body=data)
            for name, fd in held.items():
                end, failed = _rest(fd, FIRST, old[name], f"{name} held open ({mode}, readahead {readahead})")
                assert failed in (None, errno.ESTALE), (name, errno.errorcode.get(failed, failed))
                if failed is None:
                    assert end == SIZE, f"{name}: {end} bytes, then the end: the snapshot has {SIZE}"
                if readahead == "none":  # its last pages were asked for after the overwrite: refused
                    assert failed == errno.ESTALE and end < SIZE, (name, end, failed)
        finally:
            for fd in held.values():
                os.close(fd)
        for name in old:  # opened afresh after the overwrite: the same rule
            fd = os.open(mnt / name, os.O_RDONLY)
            try:
                end, failed = _rest(fd, 0, old[name], f"{name} opened again ({mode}, readahead {readahead})")
            finally:
                os.close(fd)
            assert failed in (None, errno.ESTALE), (name, errno.errorcode.get(failed, failed))
            assert failed is not None or end == SIZE


def test_readers_racing_repeated_overwrites_only_ever_get_the_snapshots_bytes(env: FuseEnv) -> None:
    """Four readers reading one file over and over, each through its own descriptor, while a
    writer overwrites the object again and again with other bytes of the same size: every
    byte any of them reads is the snapshot's (how many reads fail depends on the timing; what
    they read never does)."""
    with open(env.config_path, "a") as fh:
        fh.write(f"page_size = {PAGE}\nreadahead_bytes = {4 * PAGE}\n")
    rng = random.Random(2424)
    old = rng.randbytes(SIZE)
    client = env.endpoint.client()
    client.put_object(Bucket=env.bucket, Key="race/data.bin", Body=old)
    mnt = env.mountpoint("race")
    with env.mounted(mnt, f"s3://{env.bucket}/race", "--no-prefetch", "--no-passthrough"):
        with open(mnt / "data.bin", "rb") as fh:  # listed and snapshotted before the first overwrite
            assert fh.read(PAGE) == old[:PAGE]
        stop = threading.Event()
        problems: list[str] = []

        def reader(i: int) -> None:
            try:
                for _ in range(4):
                    try:
                        fd = os.open(mnt / "data.bin", os.O_RDONLY)
                    except OSError as exc:
                        if exc.errno != errno.ESTALE:
                            problems.append(f"reader {i}: open: {exc}")
                        continue
                    try:
                        end, failed = _rest(fd, 0, old, f"reader {i}")
                    finally:
                        os.close(fd)
                    if failed not in (None, errno.ESTALE) or (failed is None and end != SIZE):
                        problems.append(
                            f"reader {i}: {end} bytes, then {errno.errorcode.get(failed, failed)}"
                        )
            except AssertionError as exc:
                problems.append(str(exc))

        def writer() -> None:
            n = 0
            while not stop.is_set() and n < 50:
                n += 1
                client.put_object(Bucket=env.bucket, Key="race/data.bin", Body=bytes([n]) * SIZE)

        threads = [threading.Thread(target=reader, args=(i,)) for i in range(4)]
        w = threading.Thread(target=writer)
        w.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        stop.set()
        w.join(60)
        assert problems == []
