"""A RELEASE whose own commit fails lets its handle go, and the file is read as acknowledged
(docs/writeback.md, "Out of space at close").

A handle whose close (FLUSH) succeeded may write again through a ``dup(2)`` of its
descriptor, or through a shared mapping; the close of the last descriptor (the dup, the
mapping's own) is the one that reports the shared tier down (EIO), and the RELEASE after it
commits again. Before, that commit raised out of ``release`` before
the handle's close, so the mount kept the open file (and its staged file) until the
unmount: with the shared tier back, every later open read bytes no close acknowledged, and
the next close of another handle (one byte written) returned 0 and committed them.

Real mounts, the shared tier on moto behind a loopback proxy that refuses connections
(``bench/outage_proxy.py``) for the dup's close and the RELEASE; a kill -9 after, then a
fresh mount reads what the last successful close acknowledged."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import pytest

from bench.outage_proxy import OutageProxy
from tests.fuse.conftest import FuseEnv, wait_until
from tests.fuse.test_remount import _committed
from tests.fuse.test_workspace_review11 import _kill_9
from tests.fuse.test_wrongbytes74_restore_outage import _through

pytestmark = pytest.mark.fuse

FLAGS = {"daemon": (), "passthrough": ("--passthrough",), "writes-in-c": ("--writes-in-c",)}


def _on_s3(env: FuseEnv) -> None:
    """The shared tier in the bucket (through the proxy ``_through`` sets), not a local dir."""
    with open(env.config_path, "a") as fh:  # [cache] is the config's last section
        fh.write(f'shared_url = "s3://{env.bucket}/shared"\n')


def _rewrite_after_close(mnt: Path, old: bytes, how: str, proxy: OutageProxy) -> None:
    """``f.bin`` written as ``old`` and closed (acknowledged), then 100 KB of it rewritten
    through the same handle after that close (``how``: a dup of the descriptor, or a shared
    mapping), the shared tier refusing connections from the rewrite's end on."""
    fd = os.open(mnt / "f.bin", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    assert os.write(fd, old) == len(old)
    if how == "dup":
        again = os.dup(fd)
        os.close(fd)  # acknowledged: its chunk is in S3
        assert os.pwrite(again, b"N" * 100_000, 0) == 100_000
        proxy.set_mode("refuse")
        with pytest.raises(OSError):
            os.close(again)  # EIO: nothing acknowledged; the RELEASE's commit fails too
        return
    mapped = mmap.mmap(fd, len(old))  # holds a dup of the descriptor (CPython's mmap)
    os.close(fd)  # acknowledged
    mapped[:100_000] = b"N" * 100_000  # stores through the mapping, after that close
    proxy.set_mode("refuse")
    mapped.close()  # its descriptor's close fails (EIO), then the RELEASE's commit


@pytest.mark.parametrize("how", ["dup", "mapped"])
@pytest.mark.parametrize("flags", FLAGS)
def test_a_release_whose_commit_fails_lets_its_handle_go(
    env: FuseEnv, moto_endpoint, flags: str, how: str
) -> None:
    if flags == "passthrough":
        from fuse_adapter import fuse_ops

        if not fuse_ops.PASSTHROUGH:
            pytest.skip("this kernel or build has no FUSE passthrough")
    name = f"release-fails-{flags}-{how}"
    mnt = env.mountpoint(name)
    _on_s3(env)
    with OutageProxy(moto_endpoint.url) as proxy:
        _through(env, proxy)
        old = os.urandom(300_000)
        with env.mounted(mnt, "--workspace", name, *FLAGS[flags]) as proc:
            log = env.root / f"mount-{mnt.name}.log"
            _rewrite_after_close(mnt, old, how, proxy)
            done = ("release failed", "could not be committed at its release")  # main, this branch
            wait_until(lambda: any(said in log.read_text() for said in done), 20)
            proxy.set_mode("up")
            assert (mnt / "f.bin").read_bytes() == old  # main: the unacknowledged bytes
            fd = os.open(mnt / "f.bin", os.O_WRONLY)
            os.pwrite(fd, b"Z", len(old) - 1)
            os.close(fd)  # main: 0, committing the unacknowledged bytes with its Z
            assert (mnt / "f.bin").read_bytes() == old[:-1] + b"Z"
            _kill_9(proc)
        assert _committed(env, mnt, name, "f.bin") == old[:-1] + b"Z"
