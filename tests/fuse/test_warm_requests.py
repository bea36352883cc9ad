"""What still reaches the daemon on a warm pass, counted by the kernel's fuse tracepoint.

A warm ``os.open``/``os.read``/``os.close`` of a file, and a warm ``open()`` with an explicit
buffer size (datahub.torch's readers: ``OPEN_BUFFER``), send the daemon nothing: the default
read mode's zero-message opens, kept page cache and long entry/attr timeouts. Python 3.11's
default ``open()`` also calls ``isatty()``, an ioctl (TCGETS) that the kernel forwards as
FUSE_IOCTL on every call: Linux <= 6.18 has no ``no_ioctl`` flag that would remember an
ENOSYS answer (see docs/fuse.md). That request must be the only one, at most one per open,
and it must be refused with ENOSYS (the daemon registers no ioctl handler), never answered
with data.

Counted with ``/sys/kernel/tracing/events/fuse/fuse_request_send`` and
``fuse_request_end`` (tests/fuse/fuse_tracepoint.py): the kernel's own record of every
request of this mount, whichever transport the daemon reads them from (an strace of
/dev/fuse saw nothing once requests came over io_uring). The warm pages are mlocked while
counting, so that kernel reclaim cannot turn into a READ (see test_zero_message_open.py).
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from datahub.torch.files import OPEN_BUFFER
from tests.fuse.conftest import Dataset, FuseEnv, upload_dataset
from tests.fuse.fuse_tracepoint import FuseRequests
from tests.pagecache import pinned_in_page_cache, read_unbuffered

pytestmark = pytest.mark.fuse

N_FILES = 30


@pytest.fixture
def files(env: FuseEnv) -> Dataset:
    return upload_dataset(env, "warm", {f"d/f{i:02d}.bin": os.urandom(500 + 311 * i) for i in range(N_FILES)})


def _read_default(path: Path) -> bytes:
    with open(path, "rb") as f:  # buffering=-1: Python 3.11's open() asks isatty()
        return f.read()


def _read_buffered(path: Path) -> bytes:
    with open(path, "rb", buffering=OPEN_BUFFER) as f:  # an explicit size: no isatty()
        return f.read()


def _counted(
    mnt: Path, paths: dict[Path, bytes], reader: Callable[[Path], bytes], threads: int
) -> FuseRequests:
    """Read every path warm with ``threads`` readers under the tracepoint; bytes checked."""
    with FuseRequests(mnt) as requests, ThreadPoolExecutor(threads) as pool:
        assert dict(zip(paths, pool.map(reader, paths), strict=True)) == paths
    return requests


@pytest.mark.parametrize("threads", [1, 8])
def test_a_warm_pass_sends_no_request_but_the_refused_ioctl_of_a_default_open(
    env: FuseEnv, files: Dataset, threads: int
) -> None:
    """With 8 reader threads, ioctls queue up and datahub's pyfuse3 answers them in a burst."""
    mnt = env.mountpoint("warmreq")
    with env.mounted(
        mnt, "warm", "--no-passthrough"
    ):  # zero-message opens from the first (the default mode switches to them)
        root = mnt / "warm" / f"v{files.seq}"
        paths = {root / key: data for key, data in files.objects.items()}
        for path, data in paths.items():  # cold: through the daemon, fills the page cache
            assert read_unbuffered(path) == data
        with pinned_in_page_cache(list(paths)):
            time.sleep(0.2)  # let replies to the cold pass (and any late request) drain
            raw = _counted(mnt, paths, read_unbuffered, threads)
            buffered = _counted(mnt, paths, _read_buffered, threads)
            default = _counted(mnt, paths, _read_default, threads)

    assert raw.counts() == {}, f"warm os.open/os.read sent the daemon {dict(raw.counts())}"
    assert buffered.counts() == {}, (
        f"warm open(buffering=OPEN_BUFFER) sent the daemon {dict(buffered.counts())}"
    )

    sent = default.counts()
    assert set(sent) <= {"FUSE_IOCTL"}, f"warm open() sent {dict(sent)}, not only FUSE_IOCTL"
    assert sent["FUSE_IOCTL"] <= len(paths), f"{sent['FUSE_IOCTL']} ioctls for {len(paths)} warm opens"
    answers = default.answers()
    assert answers == {("FUSE_IOCTL", -errno.ENOSYS): sent["FUSE_IOCTL"]}, (
        f"answers to the warm open()s' ioctls {dict(answers)}: each should be refused with ENOSYS"
    )
