"""Read-ahead through a real mount has one owner: every byte comes from the origin once.

The kernel sends a sequential reader's reads (and its own readahead) out of order and in
parallel; the daemon passes them to the cache, whose prefetcher alone reads ahead. Counted
from the daemon's own origin counters (its cache stats snapshot): a sequential read of a
file that a stream follows and of one that readahead runs cover fetches exactly the
files' bytes, in fewer requests than pages, with and without ``--no-cache``; and with
the default background warm-up racing the reader, still every byte once.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from datahub.cache.stats import read_snapshots, stats_dir
from tests.fuse.conftest import FuseEnv, upload_dataset, wait_until

pytestmark = pytest.mark.fuse

MiB = 1024**2


def _daemon_stats(env: FuseEnv, pid: int) -> dict | None:
    return next((s for s in read_snapshots(stats_dir(env.config)) if s["pid"] == pid), None)


def _settled(env: FuseEnv, pid: int, nbytes: int) -> dict:
    """The daemon's stats once it has fetched ``nbytes`` and no read-ahead is under way."""
    seen: dict = {}

    def done() -> bool:
        stats = _daemon_stats(env, pid)
        if stats is None:
            return False
        seen.update(stats)
        return (
            stats["origin"]["bytes"] >= nbytes
            and stats["streams"]["running"] == 0
            and stats["readahead"]["queued_bytes"] == 0
        )

    wait_until(done, timeout=60)
    return seen


@pytest.mark.parametrize(
    "flags", [(), ("--no-prefetch",), ("--no-cache",)], ids=["warm-up", "no-warm-up", "no-cache"]
)
def test_sequential_read_through_a_mount_fetches_each_byte_once(env: FuseEnv, flags: tuple[str, ...]) -> None:
    with open(env.config_path, "a") as fh:  # small pages and thresholds: both read-ahead paths, quickly
        fh.write("page_size = 1048576\nstream_min_bytes = 8388608\nreadahead_bytes = 8388608\n")
    objects = {"streamed.bin": os.urandom(20 * MiB + 123), "runs.bin": os.urandom(6 * MiB + 77)}
    ds = upload_dataset(env, "seq", objects)
    mnt = env.mountpoint("seq")
    with env.mounted(mnt, "seq", *flags) as proc:
        total = 0
        for name, data in sorted(objects.items()):
            path = Path(mnt, "seq", f"v{ds.seq}", name)
            with open(path, "rb", buffering=0) as f:
                out = bytearray()
                while chunk := f.read(MiB):
                    out += chunk
            assert bytes(out) == data, name
            total += len(data)
        stats = _settled(env, proc.pid, total)
    assert stats["origin"]["bytes"] == total, str(
        (stats["origin"], stats["streams"], stats["readahead"])
    )  # no byte fetched twice (no double read-ahead)
    assert stats["origin"]["errors"] == 0
    if "--no-prefetch" in flags or "--no-cache" in flags:  # read-ahead alone (no warm-up)
        # one stream for the large file: fewer requests than pages (27); how many fewer
        # depends on how the kernel interleaves its parallel reads with the read-ahead
        assert stats["streams"]["sequential"] == 1
        assert stats["origin"]["fetches"] < 27, stats["origin"]
