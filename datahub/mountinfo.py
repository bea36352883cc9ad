"""The kernel's mount table, /proc/self/mountinfo, read one way for every part of datahub.

Why one module: the mount command (which mount is datahub's), the CSI plugin (which target is
its own bind), ``MountSource`` (which version a bind shows) and the mount's own readahead
setting all ask the table, and never the mounted file systems themselves (a stat of a stale
FUSE mount fails with ENOTCONN; one of a live but stopped daemon waits for ever). Four
parsers had grown, one of which unescaped spaces only, so a mount point with a tab or a
backslash in its path was not found there.
"""

from __future__ import annotations

from dataclasses import dataclass

#: a FUSE mount's type as the kernel shows a datahub mount (``subtype=datahub``)
DATAHUB_FSTYPE = "fuse.datahub"
#: the ``fsname`` prefixes the daemon mounts with: read-only views, workspaces
DATAHUB_SOURCES = ("datahub:", "datahub-ws:")

MOUNTINFO = "/proc/self/mountinfo"


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
    """mountinfo escapes space, tab, newline and backslash as octal (``\\040`` ...)."""
    if "\\" not in field:
        return field
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def parse_line(line: str) -> MountEntry:
    """One line of the table (optional fields end at the ``-`` separator)."""
    fields = line.split()
    at = fields.index("-")
    return MountEntry(
        point=unescape(fields[4]),
        root=unescape(fields[3]),
        device=fields[2],
        fstype=fields[at + 1],
        source=unescape(fields[at + 2]),
    )


def mount_entries() -> list[MountEntry]:
    """Every mount of this mount namespace, in the kernel's order (a later one at the same mount
    point is mounted over the earlier: the visible one)."""
    with open(MOUNTINFO) as fh:
        return [parse_line(line) for line in fh]


def top_mount(path: str, entries: list[MountEntry] | None = None) -> MountEntry | None:
    """What is mounted exactly at ``path`` (absolute, symlinks resolved) and visible there, or
    None."""
    found = None
    for entry in mount_entries() if entries is None else entries:
        if entry.point == path:
            found = entry
    return found
