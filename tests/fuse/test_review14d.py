"""review14d: adversarial checks on real mounts of d8f1ec5 (a mount that fails before serving
closes its cache: a bucket mount that failed after its listing thread and warm-up were
made, at the kernel mount itself (its fsname), left its cache open) and of d3bc2ca (a
revert spares O_RDONLY handles: a reader made a writer)."""

from __future__ import annotations

import contextlib
import errno
import mmap
import os

import pytest

from tests.fuse.conftest import FuseEnv
from tests.fuse.test_review14wb import BIG_QUOTA, staged_and_acknowledged
from tests.fuse.test_workspace_nospace import _close_fails_for_space
from tests.fuse.test_workspace_review11 import _kill_9, _remounted


@pytest.mark.parametrize("prefix", ["a,b", "données"], ids=["comma", "non-ascii"])
def test_a_bucket_prefix_with_a_comma_or_non_ascii_mounts_and_closes_its_cache(
    env: FuseEnv, prefix: str
) -> None:
    """S3 keys may hold commas and any UTF-8; a bucket mount names its source in the mount's
    fsname, which libfuse splits at commas and pyfuse3 encodes as ASCII. Before, such a
    prefix could not be mounted at all ('fuse_session_new() failed' / UnicodeEncodeError,
    both reported as 'a datahub bug'), and that failure, at the kernel mount, came after the
    cache was opened and was not closed (d8f1ec5 closes it only for failures before the
    threads start), so the next start rebuilt its index as after a crash."""
    env.endpoint.client().put_object(Bucket=env.bucket, Key=f"{prefix}/x.txt", Body=b"hello")
    mnt = env.mountpoint("odd-prefix")
    with env.mounted(mnt, f"s3://{env.bucket}/{prefix}"):
        assert (mnt / "x.txt").read_bytes() == b"hello"
    with env.mounted(mnt, f"s3://{env.bucket}/{prefix}"):  # the first closed its cache
        pass
    log = (env.root / f"mount-{mnt.name}.log").read_text()
    assert "a previous process did not close it" not in log, log


def test_a_reader_reopened_for_writing_or_mapped_shared_writable_cannot_slip_past_a_revert(
    env: FuseEnv,
) -> None:
    """d3bc2ca spares ``O_RDONLY`` handles when a revert of a staged file refuses the others'
    closes. A reader cannot become a writer: ``mmap(PROT_WRITE, MAP_SHARED)`` of it fails
    with EACCES, and reopening it through ``/proc/self/fd/N`` for writing is a new open, a
    writable handle, so the bytes written through it and dropped by the revert make its
    close fail (ENOSPC) instead of returning 0; the file stays as acknowledged."""
    name = "r14d-reader"
    acked = os.urandom(100_000)
    with staged_and_acknowledged(env, name, acked) as (
        mnt,
        proc,
        b,
    ):  # b stays open, so the others share its staged file
        reader = os.open(mnt / "f.bin", os.O_RDONLY)
        with pytest.raises(PermissionError):
            mmap.mmap(reader, len(acked), mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        again = os.open(f"/proc/self/fd/{reader}", os.O_RDWR)
        assert os.pwrite(again, b"lost", 0) == 4
        a = os.open(mnt / "f.bin", os.O_RDWR)
        assert os.pwrite(a, b"x", 2 * BIG_QUOTA) == 1
        _close_fails_for_space(a)
        with pytest.raises(OSError) as refused:
            os.close(again)
        assert refused.value.errno == errno.ENOSPC
        os.close(reader)
        with contextlib.suppress(OSError):
            os.close(b)  # a staged writer: refused (the kernel never says whether it wrote)
        assert (mnt / "f.bin").read_bytes() == acked
        _kill_9(proc)
    assert _remounted(env, mnt, name) == {"f.bin": acked}
