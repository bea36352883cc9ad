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
from dataclasses import dataclass

#: a FUSE mount's type as the kernel shows a datahub mount (``subtype=datahub``)
DATAHUB_FSTYPE = "fuse.datahub"
#: the ``fsname`` prefixes the daemon mounts with: read-only views, workspaces
DATAHUB_SOURCES = ("datahub:", "datahub-ws:")


@dataclass(frozen=True)
class MountEntry:
    """One line of /proc/self/mountinfo: where, what part of which file system, of what type."""

    point: str  # the mount point
    root: str  # the directory of the mounted file system shown there ("/": all of it; a bind: less)
    device: str  # major:minor: one per FUSE connection, shared by every bind of it
    fstype: str
    source: str

    @property
    def datahub(self) -> bool:
        """A datahub daemon's file system (the mount itself or a bind of part of it)."""
        return self.fstype == DATAHUB_FSTYPE and self.source.startswith(DATAHUB_SOURCES)

    @property
    def fuse(self) -> bool:
        return self.fstype == "fuse" or self.fstype.startswith("fuse.")

    def described(self) -> str:
        """``a fuse.sshfs mount of 'me@host:/data'``, for messages."""
        bound = f" (a bind of its directory {self.root})" if self.root != "/" else ""
        return f"a {self.fstype} mount of {self.source!r}{bound}"


def unescape(field: str) -> str:
    """/proc/self/mountinfo escapes space, tab, newline and backslash as octal."""
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def mount_entries() -> list[MountEntry]:
    """Every mount of this mount namespace, in the kernel's order (a later one at the same mount
    point is mounted over the earlier: the visible one)."""
    entries = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            fields = line.split()
            at = fields.index("-")
            entries.append(
                MountEntry(
                    point=unescape(fields[4]),
                    root=unescape(fields[3]),
                    device=fields[2],
                    fstype=fields[at + 1],
                    source=unescape(fields[at + 2]),
                )
            )
    return entries


def canonical(mountpoint: str) -> str:
    """Absolute path with symlinks resolved in its parents only.

    Never stat the mount point itself: from inside the daemon that would be a FUSE
    request to our own, not yet serving, file system (a deadlock).
    """
    path = os.path.abspath(mountpoint)
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


def top_mount(path: str, entries: list[MountEntry] | None = None) -> MountEntry | None:
    """What is mounted exactly at ``path`` (canonical) and visible there, or None."""
    found = None
    for entry in mount_entries() if entries is None else entries:
        if entry.point == path:
            found = entry
    return found


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
