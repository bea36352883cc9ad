"""What a mount is to the kernel, outside the FUSE protocol: its device in
/proc/self/mountinfo, its readahead in /sys/class/bdi, its page cache written back
(``sync_mount``), and a count of the requests it serves. Plain Python (no pyfuse3), used by the shim and the mount's assembly.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from collections.abc import Callable

from datahub.mountinfo import top_mount

log = logging.getLogger(__name__)


def mount_device(mountpoint: str) -> str:
    """``major:minor`` of a mount, from /proc/self/mountinfo: no request to the file system
    (a stat from inside the daemon could wait forever on its own stopped loop)."""
    found = top_mount(os.path.abspath(mountpoint))
    if found is None:
        raise FileNotFoundError(f"{mountpoint} is not mounted")
    return found.device


def sync_mount(mountpoint: str) -> bool:
    """``syncfs`` of the mount: the kernel writes back its dirty pages, as WRITEs to this
    daemon, which must still be serving; False (nothing done) if the path is no longer this
    mount (a syncfs there would sync the file system under it).

    Why: with the kernel's write-back cache (a workspace's ``--writeback-cache``) bytes a
    holder wrote sit in the page cache until a close, an fsync or the kernel's own
    writeback. ``datahub umount`` of a busy mount stops the daemon, which then closes the
    holders' handles durably; without this the pages still in the cache were never sent
    and the file was committed without them (0 bytes, where the daemon path kept them)."""
    fd = os.open(mountpoint, os.O_RDONLY | os.O_DIRECTORY)
    try:
        st = os.fstat(fd)
        if f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}" != mount_device(mountpoint):
            return False
        if ctypes.CDLL(None, use_errno=True).syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs of {mountpoint}: {os.strerror(err)}")
    finally:
        os.close(fd)
    return True


def set_readahead(mountpoint: str, kib: int) -> None:
    """Raise the kernel readahead of this mount (root only; best effort).

    FUSE starts with the VM default (128 KiB), which caps each sequential read request the
    kernel sends us; with 1 MiB a cold sequential read costs a quarter as many round trips.
    """
    try:
        path = f"/sys/class/bdi/{mount_device(mountpoint)}/read_ahead_kb"
        with open(path, "w") as fh:
            fh.write(str(kib))
    except OSError as exc:
        log.info("could not set readahead of %s to %d KiB: %s", mountpoint, kib, exc)


def request_counter(in_c: Callable[[], int]) -> Callable[[], int]:
    """A number that moves with every request the mount serves.

    Why: a reader served from the kernel's page cache never reaches the daemon's code, so
    the cache cannot see that it is busy; but every warm Python ``open()`` still sends the
    ``isatty`` ioctl (and, with passthrough, OPEN and RELEASE). Read on the loop's thread,
    each is one read syscall of that thread (/proc/self/task/TID/io ``syscr``; call this in
    the thread that will run ``serve``); answered by pyfuse3's C threads (the default:
    fastloop, io_uring), each moves their counters (``in_c``: ``fuse_ops.c_requests``).
    Both cost the requests nothing.
    """
    path = f"/proc/self/task/{threading.get_native_id()}/io"

    def count() -> int:
        reads = 0
        with open(path, "rb") as f:
            for line in f:
                if line.startswith(b"syscr"):
                    reads = int(line.split()[1])
                    break
        return reads + in_c()

    return count


def single_leaf(group: BaseExceptionGroup) -> BaseException | None:
    """The one exception inside ``group`` (nested groups included), or None if there are more:
    a single failure reaches the caller as itself, not as a group."""
    leaves: list[BaseException] = []
    stack: list[BaseException] = [group]
    while stack:
        exc = stack.pop()
        if isinstance(exc, BaseExceptionGroup):
            stack.extend(exc.exceptions)
        else:
            leaves.append(exc)
    return leaves[0] if len(leaves) == 1 else None


def requests_in_c(c_stats: dict) -> int:
    """Requests pyfuse3's C threads answered or handed to the loop (fastloop, io_uring), from
    its ``passthrough_stats()``: a warm open answered there never makes the loop's thread
    read anything (``fuse_ops.c_requests``)."""
    t = c_stats
    return (
        t["loop_opens"] + t["loop_releases"] + t["loop_ioctls"] + t.get("loop_lookups", 0) + t["loop_handed"]
    )
