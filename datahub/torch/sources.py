"""Where a VersionDataset's bytes come from: the tiered cache, or a mounted version.

Both are picklable and open what they need lazily in each process: a DataLoader worker
(forked or spawned) gets a copy that opens its own cache or file handles, never one
inherited from the parent.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from datahub import mountinfo
from datahub.catalog import Record
from datahub.config import Config
from datahub.errors import InvalidInput, ObjectChanged
from datahub.torch.files import mount_id, open_file, read_file

MOUNT_INFO = ".datahub"  # what a datahub mount says at its root: which versions it shows


class CacheSource:
    """Read records through ``datahub.cache`` (RAM -> disk -> shared -> object store)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._pid = 0
        self._cache: Any = None
        self._stores: Any = None

    def _open(self) -> Any:
        if self._cache is None or self._pid != os.getpid():
            from datahub.cache import open_cache
            from datahub.storage import StoreRegistry

            self._stores = StoreRegistry(self.config)
            self._cache = open_cache(self.config, self._stores)
            self._pid = os.getpid()
        return self._cache

    def read(self, record: Record, offset: int = 0, size: int | None = None) -> bytes:
        return self._open().read(record.ref, offset, size)

    def check_version(self, dataset: str, seq: int) -> None:
        """Nothing to check: each record is read as the object and etag it names."""

    def hint(self, records: Sequence[Record]) -> None:
        """Tell the cache the upcoming read order, so it fetches ahead (within its budget)."""
        self._open().hint([r.ref for r in records])

    def close(self) -> None:
        if self._cache is not None and self._pid == os.getpid():
            self._cache.close()
            self._stores.close()
        self._cache = self._stores = None

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["config"])


_VERSION_ENTRY = re.compile(r"v[0-9]+")


def _visible_mount(mount: Path) -> tuple[str, str, str] | None:
    """(type, source, root) of the mount visible at ``mount``, from /proc/self/mountinfo: the
    root is the directory of the mounted file system shown there (``/``: all of it, else a bind
    of a directory inside it)."""
    try:
        found = mountinfo.top_mount(str(mount))
    except OSError:
        return None
    return None if found is None else (found.fstype, found.source, found.root)


def _bound_view(
    mount: Path, root: Path, source: str, bound: str
) -> tuple[Path, tuple[str, ...], dict[str, Any]]:
    """``_mount_info`` of a bind mount of a directory (``bound``) inside a datahub read-only
    mount (``source``: its fsname): the version from the bind's root in that file system
    (``/<dataset>/v<seq>[/...]``), or ``info["refused"]``, why no version can be read through it.

    Why: a CSI dataset volume is such a bind (of ``MOUNT/<dataset>/v<seq>[/<prefix>]``): the
    pod sees no ``.datahub``, and its volume passed as a plain directory, for any version and
    below a version's directory (leftovers25). A bind of a bucket mount's directory passed the
    same way (gaps26): its snapshot version is named only by the ``.datahub`` at the bucket
    mount's root, which the bind does not show, and record ``train/x`` was read as
    ``<bind>/train/x``, the bucket's ``<dir>/train/x``: another object or none. ``info["top"]``
    is the version's directory when the bind shows it whole, "" when it shows only a directory
    below it; ``info["bound"]`` the bind's root."""
    above = Path(bound).parts[1:]
    full = (*above, *root.relative_to(mount).parts)  # ``root``'s path in the mounted file system
    shown = source.removeprefix("datahub:")

    def refused(why: str) -> tuple[Path, tuple[str, ...], dict[str, Any]]:
        return mount, full, {"versions": [], "source": shown, "bound": bound, "refused": why}

    if "://" in shown:
        return refused(
            f"{root} is in a bind of the directory {bound} of the datahub mount of the bucket "
            f"{shown}: which snapshot version it shows is said only at that mount's root "
            "(its .datahub, which a bind of a directory below does not show), and its paths "
            f"are the bucket's keys below {bound.lstrip('/')!r}, not a version's keys. Bind "
            "(or publish) the bucket mount's root and give from_catalog's prefix= for the keys "
            "below, or read through the cache (CacheSource)"
        )
    if len(full) < 2 or not _VERSION_ENTRY.fullmatch(full[1]):
        # at or above MOUNT/<dataset>: each version is a directory below, and record `v1/x` was
        # read as version v1's `x`
        here = mount.joinpath(*full[len(above) :])
        tops = sorted(str(p) for p in here.iterdir() if _VERSION_ENTRY.fullmatch(p.name)) if full else []
        return refused(
            f"{root} is in a bind of the directory {bound} of the datahub mount of {shown}, "
            "above its versions' directories: a mount lays each version out in its own "
            "directory"
            + (f" ({', '.join(tops)})" if tops else "")
            + ", and MountSource reads a version's keys from that directory: give it that "
            "directory, or read through the cache (CacheSource)"
        )
    # the version's directory as this bind shows it, "" when the bind is of a directory below it
    top = str(mount.joinpath(*full[len(above) : 2])) if len(above) <= 2 else ""
    return mount, full, {"versions": [f"{full[0]}@{full[1]}"], "source": shown, "bound": bound, "top": top}


class MountSource:
    """Read records as files under a mounted version (``datahub mount``) or any directory."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        # once check_version passed on a datahub mount: the version it showed, the directory it
        # resolved to (MOUNT/ds/latest -> MOUNT/ds/v7) and the mount's unique id (``mount_id``)
        self._pinned: str | None = None
        self._read_root = self.root
        self._mount: int | None = None
        # the read root is a datahub mount's root, whose name ``.datahub`` is the mount's own file
        self._at_mount_root = False

    def check_version(self, dataset: str, seq: int) -> None:
        """Refuse a datahub mount's directory of another version than ``dataset@v<seq>``.

        Why: files are read by key, and a mount shows the versions it was mounted with
        (``latest`` or a tag resolved at mount time); over another version's directory the
        records of ``seq`` got that version's bytes under their keys, with their own labels.
        A directory that is not on a datahub mount (no ``.datahub`` at its mount point) is
        taken as it is. A bucket mount shows a version only when it lists whole and recorded
        its listing as that snapshot version (``_version_shown``)."""
        found = self._mount_info(self.root)
        if found is not None and found[2].get("refused"):
            raise InvalidInput(found[2]["refused"], dataset=dataset, version=seq)
        above = self._version_directories_below(self.root)
        if above:
            mine = [d for d in above if d.endswith(f"/{dataset}/v{seq}")]
            raise InvalidInput(
                f"{self.root} is above the versions of the datahub mount there: a mount lays each "
                f"version out in its own directory ({', '.join(above)}), and MountSource reads a "
                f"version's keys from that directory: "
                + (f"MountSource({mine[0]!r})" if mine else f"mount {dataset}@v{seq} and give its directory"),
                dataset=dataset,
                version=seq,
            )
        shown = self._version_shown(self.root)
        if shown is not None and shown != f"{dataset}@v{seq}":
            raise InvalidInput(
                f"{self.root} shows {shown}, not {dataset}@v{seq}: its files are not that version's "
                f"records. Read {dataset}@v{seq} from its own directory (MOUNT/{dataset}/v{seq}, after "
                f"`datahub mount MOUNT {dataset}@v{seq}`), or through the cache (CacheSource)",
                dataset=dataset,
                version=seq,
            )
        if shown is not None:
            top = self._version_top(self.root)
            found = self._mount_info(self.root)
            bound = found[2].get("bound") if found is not None else None
            if top is None and bound:
                # Why: a bind of MOUNT/ds/v7/<prefix> (a CSI volume with a prefix) shows no
                # .datahub and no version directory; record ``<prefix>/x`` was read as
                # ``<root>/<prefix>/x``, another key's file or none (leftovers25)
                raise InvalidInput(
                    f"{self.root} shows only the keys below {bound.split('/', 3)[3]!r} of {shown} (a bind "
                    f"of the datahub mount's {bound}, as a CSI volume published with a prefix is): "
                    "MountSource reads each record's key from the version's own directory, and from "
                    "below it a record read another key's file: publish the volume without a prefix "
                    "and give from_catalog's prefix= for the keys below, or read through the cache "
                    "(CacheSource)",
                    dataset=dataset,
                    version=seq,
                )
            if top is not None and top != self.root.resolve():
                # Why: record ``k`` is read as ``<root>/k``; below the version's directory
                # (MOUNT/ds/v7/a) record ``a/x`` read the file of the key ``a/a/x`` (review25)
                raise InvalidInput(
                    f"{self.root} is a directory inside {shown}'s ({top}): MountSource reads each "
                    f"record's key from the version's own directory, and from below it a record "
                    f"read another key's file: MountSource({str(top)!r}), with from_catalog's "
                    "prefix= for the keys below",
                    dataset=dataset,
                    version=seq,
                )
            self._pinned, self._read_root = shown, self.root.resolve()
            self._mount = self._mount_of(self._read_root)
            found = self._mount_info(self.root)
            self._at_mount_root = found is not None and found[1] == () and "bound" not in found[2]

    def shadowed(self, key: str) -> bool:
        """Whether the file of ``key`` is hidden by the mount's own ``.datahub`` (``MOUNT_INFO``).

        A bucket snapshot mount shows the bucket's keys at its root, where it answers the name
        ``.datahub`` with its own generated file (which snapshot it shows; not listed), so the
        bucket's object ``.datahub`` read as the mount's JSON, and any key below ``.datahub/``
        failed with a bare NotADirectoryError (review44). Below the root (a version's
        directory, ``sub/.datahub``) the name is a record's like any other."""
        return self._at_mount_root and key.split("/", 1)[0] == MOUNT_INFO

    def check_records(self, records: Sequence[Record]) -> None:
        """Refuse a selection holding a record this mount cannot show (``shadowed``), before an
        epoch starts rather than at its read (``VersionDataset.from_catalog`` calls it)."""
        if self._at_mount_root:
            for record in records:
                if self.shadowed(record.key):
                    raise self._shadowed_error(record.key)

    def _shadowed_error(self, key: str) -> InvalidInput:
        name, _, version = str(self._pinned).partition("@")
        return InvalidInput(
            f"record {key!r} of {self._pinned} cannot be read through the datahub mount at "
            f"{self._read_root}: at its root the name {MOUNT_INFO} is the mount's own file (which "
            f"snapshot it shows), which hides the record's file, so its bytes would be the mount's. "
            f"Read it through the cache (CacheSource), or mount {self._pinned} as a version "
            f"(`datahub mount MNT {self._pinned}`: its keys are below MNT/{name}/{version}, where "
            "no name is the mount's), or leave it out of the selection (from_catalog's prefix=, where=)",
            key=key,
            version=self._pinned,
        )

    def _version_top(self, directory: Path) -> Path | None:
        """The directory whose paths are the keys of the version ``directory`` shows: the
        version's (MOUNT/<dataset>/v<seq>) on a version mount, the mount point on a bucket
        snapshot's; None off a datahub mount."""
        found = self._mount_info(directory)
        if found is None:
            return None
        mount, parts, info = found
        if "top" in info:  # a bind of part of a version mount: its version's directory, if it shows it
            return Path(info["top"]) if info["top"] else None
        if len(parts) >= 2 and f"{parts[0]}@{parts[1]}" in info["versions"]:
            return mount / parts[0] / parts[1]
        return mount

    @staticmethod
    def _mount_info(directory: Path) -> tuple[Path, tuple[str, ...], dict[str, Any]] | None:
        """(mount point, ``directory``'s parts below it, its ``.datahub``) on a datahub mount."""
        root = directory.resolve()  # MOUNT/ds/latest -> MOUNT/ds/v7
        mount = next((p for p in (root, *root.parents) if os.path.ismount(p)), None)
        if mount is None:
            return None
        visible = _visible_mount(mount)
        if visible is not None and visible[0] == "fuse.datahub":
            _, source, bound = visible
            if not source.startswith("datahub:"):
                return None  # a workspace: files, no version (a `.datahub` there is a user's file)
            if bound != "/":
                # a bind of a directory inside a read-only mount: its `.datahub`, if any, is a file
                # of the bucket or version shown, never the mount's word
                return _bound_view(mount, root, source, bound)
        try:
            info = json.loads(read_file(mount / MOUNT_INFO))
        except (OSError, ValueError):
            return None  # not a datahub mount's root
        if not isinstance(info, dict) or not isinstance(info.get("versions"), list):
            return None
        return mount, root.relative_to(mount).parts, info  # type: ignore[return-value,arg-type]

    def _version_directories_below(self, directory: Path) -> list[str]:
        """The version directories below ``directory`` when it is a version mount's top
        (``MOUNT`` or ``MOUNT/<dataset>``), else none.

        Why: that directory passed as the version (a mount showing one version was taken for
        a bucket snapshot's root) and then every read failed with a bare FileNotFoundError,
        since the files are in ``MOUNT/<dataset>/v<seq>/``. A bucket mount names its snapshot."""
        found = self._mount_info(directory)
        if found is None or found[2].get("snapshot") or len(found[1]) >= 2:
            return []
        mount, parts, info = found
        tops = []
        for shown in info["versions"]:
            name, _, version = str(shown).partition("@")
            if (not parts or parts[0] == name) and version and (mount / name / version).is_dir():
                tops.append(str(mount / name / version))
        return tops

    def _version_shown(self, directory: Path) -> str | None:
        """``dataset@vN`` ``directory`` shows when it is on a datahub mount, else None."""
        found = self._mount_info(directory)
        if found is None:
            return None
        _, parts, info = found
        versions = info["versions"]
        if len(parts) >= 2 and f"{parts[0]}@{parts[1]}" in versions:
            return f"{parts[0]}@{parts[1]}"  # a version mount: MOUNT/<dataset>/v<seq>/...
        if info.get("listing") == "by-directory":
            # Why not its snapshot: such a mount serves each directory as its own listing saw
            # it when first read, and its snapshot is the whole listing taken later; an object
            # overwritten in between is the old one here (its pages cached under the old etag)
            # and the new one in the snapshot's record (review25)
            return (
                f"the bucket {info.get('source', '?')} listed by directory (each directory's files "
                "as first listed, not the records of a snapshot version"
                + (f": {', '.join(map(str, versions))} was listed again, whole)" if versions else ")")
            )
        if not versions and "://" in str(info.get("source", "")):
            # a bucket mount that records no snapshot (still listing, or refused: its dataset is
            # someone's own) serves the bucket as it is now: no version's records (review25)
            why = info.get("snapshot") or f"state {info.get('state', '?')}"
            return f"the bucket {info['source']} as it is now, no snapshot version ({why})"
        return versions[0] if len(versions) == 1 else None  # a bucket snapshot: MOUNT/<key>

    def read(self, record: Record, offset: int = 0, size: int | None = None) -> bytes:
        if self.shadowed(record.key):
            raise self._shadowed_error(record.key)
        try:
            fh = open_file(self._read_root / record.key)  # no isatty() ioctl (datahub.torch.files)
        except FileNotFoundError:
            self._still_pinned()  # a mount that no longer shows the version says so
            raise
        with fh:
            if self._mount is not None and mount_id(fh.fileno()) != self._mount:
                self._still_pinned()
            fh.seek(offset)
            return fh.read() if size is None else fh.read(size)

    def _still_pinned(self) -> None:
        """After the mount under a checked directory changed (mounted again: a CSI daemon's
        restart, a script's remount), go on only if it still shows the version checked.

        Why: records are read by key; ``latest`` or a bucket snapshot's root may show another
        version after a remount, and its bytes would come back under the checked version's
        records (integrity14). The version's own directory (``v7``) is read, and a bucket
        snapshot's root is checked again here, at the first read on the new mount."""
        if self._pinned is None:
            return
        shown = self._version_shown(self._read_root) if self._read_root.exists() else None
        if shown != self._pinned:
            raise ObjectChanged(
                f"{self.root} was mounted again and no longer shows {self._pinned} "
                f"(it shows {shown or 'no datahub version'}): the records read are that version's. "
                f"Mount {self._pinned} again there, or build the dataset from what it shows now"
            )
        self._mount = self._mount_of(self._read_root)

    @staticmethod
    def _mount_of(directory: Path) -> int | None:
        fd = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            return mount_id(fd)
        finally:
            os.close(fd)

    def hint(self, records: Sequence[Record]) -> None:
        """Tell a datahub mount the upcoming files (datahub.hint_names: a few lookups).

        Best effort: a file that is missing, or a directory that is not a datahub mount,
        costs a failed ``stat`` and nothing else.
        """
        from datahub.hint_names import encode

        inodes = []
        for record in records:
            try:
                inodes.append(os.stat(self.root / record.key).st_ino)
            except OSError:
                continue
        for name in encode(inodes):
            try:
                os.stat(self.root / name)
            except OSError:
                pass  # ENOENT is the answer: the daemon took the hint

    def close(self) -> None:
        pass
