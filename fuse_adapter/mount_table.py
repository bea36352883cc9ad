"""The kernel's mount table as datahub reads it: /proc/self/mountinfo, never a request to the
mounted file systems themselves (a stat of a stale FUSE mount fails with ENOTCONN, one of a
live but stopped daemon waits for ever).

Which mount is datahub's is decided here, once, for ``datahub umount`` and ``datahub mount``:
a FUSE mount of type ``fuse.datahub`` whose source is a datahub ``fsname`` (``datahub:<specs
or URL>`` for a read-only mount, ``datahub-ws:<workspace>`` for a workspace:
``fuse_ops.mount_options``), showing the root of that file system (``root`` ``/``). A bind of
one of its directories shows the same type and source with another root.
"""

from __future__ import annotations

import errno
import os
import threading

from datahub.mountinfo import MountEntry, mount_entries, top_mount


def canonical(mountpoint: str) -> str:
    """Absolute path with symlinks resolved in its parents only.

    Never stat the mount point itself: from inside the daemon that would be a FUSE
    request to our own, not yet serving, file system (a deadlock).
    """
    path = os.path.abspath(mountpoint)
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


def enclosing_mount(path: str, entries: list[MountEntry] | None = None) -> MountEntry | None:
    """The visible mount ``path`` (canonical) lies inside, ``path`` itself excluded: the nearest
    parent directory that is a mount point (``/`` at the latest)."""
    entries = mount_entries() if entries is None else entries
    parent = path
    while parent != "/":
        parent = os.path.dirname(parent)
        found = top_mount(parent, entries)
        if found is not None:
            return found
    return None


#: what a request to a FUSE mount whose daemon died fails with: ENOTCONN once the kernel has
#: ended the connection; a request queued while it ends gets ECONNABORTED, and over io_uring
#: one handed to a dead daemon's queue gets ECANCELED
DEAD_DAEMON_ERRNOS = frozenset({errno.ENOTCONN, errno.ECONNABORTED, errno.ECANCELED})
STALE_PROBE_SECONDS = 5.0  # a mount point that does not answer a listing by then is taken as live


def is_stale(path: str, timeout: float = STALE_PROBE_SECONDS) -> bool:
    """ENOTCONN from a request that must reach the daemon (stat may be answered from cache).

    The probe runs in a daemon thread: a live but hung daemon would block it, and a mount
    that does not answer in ``timeout`` is taken as live (never detached).
    """
    outcome: list[bool] = []

    def probe() -> None:
        try:
            os.listdir(path)
        except OSError as exc:
            outcome.append(exc.errno in DEAD_DAEMON_ERRNOS)
        else:
            outcome.append(False)

    thread = threading.Thread(target=probe, name="datahub-stale-probe", daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(outcome and outcome[0])
