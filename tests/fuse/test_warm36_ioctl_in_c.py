"""The one request a warm Python ``open()`` sends, ``isatty()``'s FUSE_IOCTL, is answered by
pyfuse3's C threads in every read mode and transport, never by the Python loop (issue 36,
warm36: the ioctl's ~10 µs per file beyond its call-by-call round trip are the kernel's, not a
hand-over to Python).

Per mode, on a real mount with a real daemon: the working set warmed until a warm epoch sends
what it should (the automatic mode switched to zero-message opens; a fixed mode published its
files), then a warm ``open()`` pass: the kernel's fuse tracepoint sees one FUSE_IOCTL per open
(and in passthrough the OPEN and RELEASE), the C threads' count of ioctls grows by as many, and
the count of requests they handed to the Python loop (``requests_handed_to_python``: the
/dev/fuse thread's and the io_uring queues') does not move.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.fuse.conftest import Dataset, FuseEnv, polled_mount, upload_dataset, wait_until
from tests.fuse.fuse_tracepoint import FuseRequests
from tests.fuse.test_fastread import read_py
from tests.fuse.test_passthrough import FILES, GUARD, mount_after, warm_into_disk
from tests.fuse.ticks import TICK, short_ticks

pytestmark = pytest.mark.fuse

#: mode -> (datahub mount flags, the read mode the stats show once warm, requests a warm open sends)
MODES = {
    "automatic": ((), "auto: zero-message", {"FUSE_IOCTL"}),
    "automatic-devfuse": (("--no-io-uring",), "auto: zero-message", {"FUSE_IOCTL"}),
    "passthrough": (("--passthrough",), "passthrough", {"FUSE_OPEN", "FUSE_IOCTL", "FUSE_RELEASE"}),
    "zero-message": (("--no-passthrough",), "zero-message", {"FUSE_IOCTL"}),
}


@pytest.fixture
def files(env: FuseEnv) -> Dataset:
    return upload_dataset(short_ticks(env), "io", FILES)


def warm_open_pass(mnt: Path, root: Path) -> dict[str, int]:
    with FuseRequests(mnt) as req:
        assert {key: read_py(root / key) for key in FILES} == FILES
    return req.counts()


def row_from_now(env: FuseEnv) -> dict:
    """The mount's row of the first stats snapshot taken from now on (every 2 s): its counters
    hold everything done before this call."""
    since = time.time()
    wait_until(lambda: bool(mount_after(env, since)), GUARD)
    return mount_after(env, since)


def warmed(env: FuseEnv, mnt: Path, root: Path, sends: set[str]) -> None:
    """Warm passes (a pause between them: the automatic mode decides once a tick) until one
    sends only what a warm open of this mode sends, and no READ."""
    deadline = time.monotonic() + GUARD
    while True:
        counts = warm_open_pass(mnt, root)
        if set(counts) <= sends and not counts.get("FUSE_READ"):
            return
        assert time.monotonic() < deadline, f"still sending {counts} after {GUARD} s"
        time.sleep(1.2 * TICK)


@pytest.mark.parametrize("mode", list(MODES))
def test_a_warm_opens_ioctl_is_answered_in_c_in_every_mode(env: FuseEnv, files: Dataset, mode: str) -> None:
    flags, read_mode, sends = MODES[mode]
    mnt = env.mountpoint(f"io{mode}")
    with env.mounted(mnt, "io", *flags):
        root = mnt / "io" / f"v{files.seq}"
        warm_into_disk(env, root)
        warmed(env, mnt, root, sends)
        wait_until(lambda: polled_mount(env).get("passthrough_handles_open", 0) == 0, GUARD)
        before = row_from_now(env)
        assert before["read_mode"] == read_mode, before
        assert before["fastloop"], before
        if "--no-io-uring" in flags:
            assert before["io_uring_queues"] == 0, before
        counts = warm_open_pass(mnt, root)
        assert set(counts) == sends and counts["FUSE_IOCTL"] == len(FILES), counts
        after = row_from_now(env)
        assert after["ioctls_in_loop_thread"] >= before["ioctls_in_loop_thread"] + len(FILES), (before, after)
        assert after["requests_handed_to_python"] == before["requests_handed_to_python"], (before, after)
        if "FUSE_OPEN" in sends:  # passthrough: its OPEN and RELEASE in C as well
            assert after["passthrough_opens_in_python"] == before["passthrough_opens_in_python"]
