"""Whether ``datahub umount PATH`` may act on what is at PATH: only on a mount ``datahub mount``
made (live, or stale after its daemon died), never on anything else.

Why: the command unmounted whatever the kernel showed at the path, with ``fusermount3 -u``,
which as root unmounts any mount: a user's sshfs, their own FUSE file system, a CSI volume's
bind in a pod's directory (gaps26). A refusal names the path, what is mounted there and what
to run instead, and nothing is unmounted.
"""

from __future__ import annotations

from collections.abc import Callable

from datahub.errors import InvalidInput
from datahub.mountinfo import MountEntry, mount_entries, top_mount
from fuse_adapter.mount_table import enclosing_mount, is_stale


def refusal(mountpoint: str, path: str, *, recorded: Callable[[str], bool]) -> InvalidInput | None:
    """Why ``datahub umount`` must leave ``path`` (canonical ``mountpoint``) alone, or None.

    ``recorded(point)``: whether a mount of this home left its record for ``point`` (the
    daemon's own mount point). Allowed: a datahub mount showing its whole file system at its
    recorded mount point; one with no record here only if stale (its daemon dead: detaching
    it is the reason the command exists); nothing mounted with a record (a dead daemon's
    workspace still to recover) or without one, outside any datahub mount ("not mounted").
    """
    entries = mount_entries()
    top = top_mount(path, entries)
    if top is None:
        if recorded(path):
            return None
        around = enclosing_mount(path, entries)
        if around is not None and around.datahub:
            return InvalidInput(
                f"{mountpoint} is not a mount point: it is a directory inside the datahub mount at "
                f"{around.point} ({around.source}), and nothing was unmounted; to unmount that mount: "
                f"`datahub umount {around.point}`",
                mountpoint=mountpoint,
            )
        return None
    if not top.datahub:
        over = (
            ", mounted over the datahub mount recorded for this path: unmount it first, then run "
            f"`datahub umount {mountpoint}` again"
            if recorded(path)
            else ""
        )
        return InvalidInput(
            f"{mountpoint} is not a datahub mount: it is {top.described()}{over}. `datahub umount` "
            "unmounts only what `datahub mount` mounted, and nothing was unmounted; unmount it with its own "
            f"tool (`fusermount3 -u {mountpoint}` for a FUSE file system, else `umount {mountpoint}`)",
            mountpoint=mountpoint,
            fstype=top.fstype,
        )
    if top.root != "/":
        return _bind(mountpoint, top, _origin(top, path, entries, recorded))
    if recorded(path) or is_stale(path):
        return None
    origin = _origin(top, path, entries, recorded)
    if origin is not None:
        return _bind(mountpoint, top, origin)
    return InvalidInput(
        f"{mountpoint} is a live datahub mount ({top.source}) that no mount of this home made: it was "
        "mounted with another --home or --config (or it is a bind of a datahub mount, as a CSI volume's "
        "target is), so its daemon is not known here and nothing was unmounted. Run `datahub umount` "
        "with the home that mounted it, so that its daemon stops (and flushes a workspace); a CSI "
        "volume is unmounted by its plugin",
        mountpoint=mountpoint,
    )


def _origin(
    top: MountEntry, path: str, entries: list[MountEntry], recorded: Callable[[str], bool]
) -> str | None:
    """The mount point of the datahub mount ``top`` binds (same FUSE connection), if visible:
    the one this home recorded, else one showing the whole file system."""
    others = [e for e in entries if e.device == top.device and e.point != path]
    mine = [e.point for e in others if recorded(e.point)]
    whole = [e.point for e in others if e.root == "/"]
    return (mine or whole or [None])[0]


def _bind(mountpoint: str, top: MountEntry, origin: str | None) -> InvalidInput:
    at = f" at {origin}" if origin else ""
    what = f"its directory {top.root}" if top.root != "/" else "its whole view"
    stop = (
        f"to stop the mount itself (its daemon flushes a workspace): `datahub umount {origin}`"
        if origin
        else "the mount itself is stopped at its own mount point"
    )
    return InvalidInput(
        f"{mountpoint} is a bind mount of the datahub mount{at} ({top.source}, {what}), not a datahub "
        "mount: `datahub umount` stops a mount's daemon, which a bind has none of, and nothing was "
        f"unmounted. To drop only the bind: `umount {mountpoint}` (a CSI volume's target: its plugin "
        f"unpublishes it); {stop}",
        mountpoint=mountpoint,
    )
