"""wbreview71: on a workspace mount without ``--passthrough``, ``msync(MS_SYNC)`` of a shared
mapping is durable when it returns (the kernel's ``fuse_fsync``: the dirty pages as WRITEs,
then an FSYNC, which commits), and stores into a mapping cut by ``ftruncate`` keep the cut:
after a kill -9 of the daemon and a remount each file holds exactly what its msync or fsync
acknowledged. docs/writeback.md ("msync(MS_SYNC) is not durable" with passthrough) said so
without a test; with ``--passthrough`` it is not (the staged file is the mapping).
"""

from __future__ import annotations

import contextlib
import mmap
import os
from pathlib import Path

import pytest

from tests.fuse.conftest import FuseEnv, make_env
from tests.fuse.test_workspace_review11 import _kill_9, _remounted
from tests.servers import S3Endpoint

pytestmark = pytest.mark.fuse


@pytest.fixture
def env(tmp_path: Path, moto_endpoint: S3Endpoint) -> FuseEnv:
    return make_env(tmp_path, moto_endpoint, cache="page_size = 16384\n")


@pytest.mark.parametrize(
    "flags",
    [(), ("--writes-in-c",), ("--writeback-cache",)],
    ids=["daemon", "writes-in-c", "writeback-cache"],
)
def test_msync_and_a_cut_mapping_are_what_survives_kill_9(env: FuseEnv, flags: tuple[str, ...]) -> None:
    name = "w71msync"
    mnt = env.mountpoint(name)
    held: list = []
    try:
        with env.mounted(mnt, "--workspace", name, *flags) as proc:
            (mnt / "synced.bin").write_bytes(b"o" * 100_000)
            fd = os.open(mnt / "synced.bin", os.O_RDWR)
            held.append(fd)
            mapped = mmap.mmap(fd, 100_000)
            held.append(mapped)
            mapped[0:5], mapped[50_000:50_005] = b"SYNC1", b"SYNC2"
            mapped.flush()  # msync(MS_SYNC): durable when it returns; no close, no fsync
            cut = os.open(mnt / "cut.bin", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            held.append(cut)
            os.ftruncate(cut, 65_536)
            view = mmap.mmap(cut, 65_536)
            held.append(view)
            view[0:4], view[40_000:40_004] = b"AAAA", b"BBBB"
            os.ftruncate(cut, 32_768)  # the page holding BBBB goes
            view[100:104] = b"CCCC"
            view.flush(0, 32_768)
            os.fsync(cut)
            _kill_9(proc)
            got = _remounted(env, mnt, name)
    finally:
        for thing in reversed(held):
            with contextlib.suppress(OSError, ValueError):
                thing.close() if isinstance(thing, mmap.mmap) else os.close(thing)
    synced = bytearray(b"o" * 100_000)
    synced[0:5], synced[50_000:50_005] = b"SYNC1", b"SYNC2"
    cut_bytes = bytearray(32_768)
    cut_bytes[0:4], cut_bytes[100:104] = b"AAAA", b"CCCC"
    assert got == {"synced.bin": bytes(synced), "cut.bin": bytes(cut_bytes)}
