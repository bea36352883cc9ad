"""Every journal's chunk prefix in the shared tier, for the operator (journals17).

Why: each workspace journal writes under ``writeback/<workspace>/j-<journal id>/``
(``chunks.py``), so a node that never comes back leaves its prefix behind, and a workspace
several nodes held in turn sits in the shared tier once per node. Only an operator can tell
that a node is gone for good; this module shows what each prefix holds (``journal_prefixes``:
objects, bytes, newest object, the cover records that name its small files) and deletes one
(``forget_journal``). Whether that is safe (the node's lease, this node's own journal) is the
caller's to decide: the lease lives in the catalog, which this package never imports
(``datahub/cli/journals_cmd.py`` holds the guards).

Keys written before journals had ids (straight under the workspace prefix) are one prefix of
their own, journal ``""``: shown, never deleted here (any journal may still name them).

A journal's flushed files are its own too: each journal flushes under
``<target>/j-<journal id>/`` (``journal_objects_url``; nodeloss18), so ``journal_objects``
finds them from the workspace's name and the journal id alone (under the default target, or
an explicit one the operator names) and ``forget_objects`` deletes them; nothing another
journal wrote is under that folder. Objects a journal from before nodeloss18 flushed lie
straight under the target, shared by every such journal of the workspace: never deleted here.

The marker (``<prefix>forgotten``, blobcas19): the prefix is the only proof that a flushed
folder of that journal id is this workspace's (review18c), and a delete takes the prefix away.
A run given a wrong ``--target`` (or the default, for a workspace with a target of its own)
deleted the prefix and nothing of the folder, and every run with the right target was then
refused: the flushed files leaked (review19a). So a delete first writes a marker under the
prefix, naming the flushed folder once one is found non-empty (``mark_forgotten``); the
prefix's other objects go, and the marker stays until the folder it names is deleted (or the
operator says there is none): a later run finds the marker and may still delete the folder.
The marker is not counted among the prefix's objects (``JournalPrefix.forgotten``).
"""

from __future__ import annotations

import errno
import json
import os
import re
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from datahub.config import Config
from datahub.errors import InvalidInput, ObjectNotFound, StorageError
from datahub.storage.base import ObjectInfo, ObjectStore
from datahub.storage.local import LocalStore
from datahub.writeback import SHARED_PREFIX, journal_objects_url, list_workspaces, workspace_dir
from datahub.writeback.chunks import JOURNAL_DIR, ChunkStore
from datahub.writeback.journal import JOURNAL_ID, Journal
from datahub.writeback.records import must_be_placed
from datahub.writeback.shared_log import ADOPTED, LOG_ROOT, newest_header

DELETERS = 8  # objects deleted at once (one request each on S3 and RADOS)
_JOURNAL_ID = re.compile(r"[0-9a-f]{1,64}")  # ``secrets.token_hex(8)`` makes 16 of these
MARKER = "forgotten"  # ``<prefix>forgotten``: a delete of the journal was begun (never a chunk key)


@dataclass
class JournalPrefix:
    """What one journal (``journal`` "": keys from before journal ids) holds in the shared tier."""

    workspace: str
    journal: str
    objects: int = 0
    bytes: int = 0
    newest: float = 0.0  # mtime of its newest object, seconds since the epoch
    this_node: bool = False  # the journal of this node's workspace of that name
    covers: int = 0  # cover records in its packs / RADOS xattrs: small files a recovery could name
    forgotten: bool = False  # its marker is there: a delete of it was begun (not in ``objects``)
    sizes: dict[str, int] = field(default_factory=dict, repr=False)

    @property
    def prefix(self) -> str:
        """Its key prefix in the shared tier (ends with ``/``)."""
        ws = f"{SHARED_PREFIX}/{self.workspace}/"
        return f"{ws}{JOURNAL_DIR}{self.journal}/" if self.journal else ws

    @property
    def marker(self) -> str:
        """The key of its marker (``MARKER``)."""
        return f"{self.prefix}{MARKER}"

    def add(self, info: ObjectInfo) -> None:
        """Count one listed object of this prefix (its marker only sets ``forgotten``)."""
        if self.journal and info.key == self.marker:
            self.forgotten = True
            return
        self.objects += 1
        self.bytes += info.size
        self.newest = max(self.newest, info.mtime)
        self.sizes[info.key] = info.size

    def as_dict(self) -> dict[str, object]:
        return {
            "workspace": self.workspace,
            "journal": self.journal,
            "layout": "journal" if self.journal else "before journal ids",
            "prefix": self.prefix,
            "objects": self.objects,
            "bytes": self.bytes,
            "newest": self.newest,
            "this_node": self.this_node,
            "covers": self.covers,
            "forgotten": self.forgotten,
        }


@dataclass
class JournalObjects:
    """One journal's flushed files: the objects under ``<target>/j-<journal id>/``."""

    workspace: str
    journal: str
    url: str  # the folder's URL
    sizes: dict[str, int] = field(default_factory=dict, repr=False)  # key (in the folder) -> bytes

    @property
    def objects(self) -> int:
        return len(self.sizes)

    @property
    def bytes(self) -> int:
        return sum(self.sizes.values())


def journal_objects(stores, target: str, workspace: str, journal: str) -> JournalObjects:
    """The objects journal ``journal`` of ``workspace`` flushed under flush target ``target``
    (``stores``: a ``StoreRegistry``): its own folder's listing, nobody else's names."""
    url = journal_objects_url(target, check_journal_id(journal))
    found = JournalObjects(workspace, journal, url)
    for info in stores.store(url).list():
        found.sizes[info.key] = info.size
    return found


def forget_objects(
    stores,
    entry: JournalObjects,
    on_deleted: Callable[[int], None] = lambda n: None,
    before_batch: Callable[[], None] = lambda: None,
) -> tuple[int, int]:
    """Delete the objects of ``entry`` (a listing: ``journal_objects``), as ``forget_journal``
    deletes a shared-tier prefix; (objects, bytes) deleted."""
    check_journal_id(entry.journal)
    store = stores.store(entry.url)
    deleted = _delete_all(store, entry.sizes, on_deleted, before_batch)
    if isinstance(store, LocalStore):
        _remove_empty_dirs(store.root, entry.url)
    return entry.objects, deleted


def check_journal_id(journal: str) -> str:
    """InvalidInput unless ``journal`` is a journal id (lower-case hex, as ``datahub cache journals`` shows)."""
    if not _JOURNAL_ID.fullmatch(journal):
        raise InvalidInput(
            f"{journal!r} is not a journal id: ids are lower-case hex, as `datahub cache journals` "
            "shows them (keys from before journal ids cannot be forgotten: any journal may name them)"
        )
    return journal


def local_journal_id(config: Config, workspace: str) -> str | None:
    """This node's journal id for ``workspace`` (meta ``journal_id`` of its local LMDB): None
    when this node has no journal of that name, "" when it has one from before journal ids
    (whose chunks lie straight under the workspace prefix). Read-only: works while a mount
    holds the journal."""
    if workspace not in list_workspaces(config):
        return None
    journal = Journal(workspace_dir(config, workspace) / "lmdb", f"workspace {workspace!r}", readonly=True)
    try:
        with journal.read() as txn:
            return txn.meta(JOURNAL_ID) or ""
    finally:
        journal.close()


def journal_prefixes(config: Config, store: ObjectStore, workspace: str | None = None) -> list[JournalPrefix]:
    """Every journal prefix of every workspace (or of ``workspace``) in shared tier ``store``,
    one listing of ``writeback/``, with its cover records counted (reads each pack once; on
    RADOS one xattr read per object, on S3/RGW one HEAD per object). Sorted by workspace,
    then journal."""
    found: dict[tuple[str, str], JournalPrefix] = {}
    listed = f"{SHARED_PREFIX}/{workspace}/" if workspace else f"{SHARED_PREFIX}/"
    for info in store.list(listed):
        name, _, rest = info.key[len(SHARED_PREFIX) + 1 :].partition("/")
        journal = rest[len(JOURNAL_DIR) :].split("/", 1)[0] if rest.startswith(JOURNAL_DIR) else ""
        entry = found.get((name, journal))
        if entry is None:
            entry = found[(name, journal)] = JournalPrefix(name, journal)
        entry.add(info)
    own = {name: local_journal_id(config, name) for name in {name for name, _ in found}}
    for (name, journal), entry in found.items():
        entry.this_node = own[name] == journal
        entry.covers = sum(1 for _ in cover_records(store, entry))
    return [found[key] for key in sorted(found)]


def journal_prefix(config: Config, store: ObjectStore, workspace: str, journal: str) -> JournalPrefix:
    """One journal's prefix as ``journal_prefixes`` shows it (``objects`` 0: nothing there),
    but for ``covers``, left 0: ``cover_records`` reads them."""
    entry = JournalPrefix(workspace, journal)
    for info in store.list(entry.prefix):
        entry.add(info)
    entry.this_node = local_journal_id(config, workspace) == journal
    return entry


def cover_records(store: ObjectStore, entry: JournalPrefix) -> Iterator[dict]:
    """The cover records (``packs.py``) in the objects of ``entry``: each names an acknowledged
    small file of that journal (``path``, ``size``, ``mtime``) that a recovery could write again.
    A record stays after its file is flushed, replaced or removed: it says what the journal
    acknowledged, not what it still holds."""
    chunks = ChunkStore(
        store, f"{SHARED_PREFIX}/{entry.workspace}", f"workspace {entry.workspace!r}", 0, entry.journal
    )
    # its keyed records verify with the key its log's header holds, and an unkeyed record of an
    # epoch it keyed is none of its own (wbgaps25, as recovery judges: ``records.cover_is_ours``)
    header = newest_header(chunks) if entry.journal else {}
    chunks.cover_key = bytes.fromhex(header["cover_key"]) if header.get("cover_key") else None
    keyed = header.get("cover_keyed")
    for _key, record in chunks.cover_records(entry.sizes):
        if record.get("keyed") or not must_be_placed(record["c"] >> 32, keyed):
            yield record


def forget_journal(
    store: ObjectStore,
    entry: JournalPrefix,
    on_deleted: Callable[[int], None] = lambda n: None,
    before_batch: Callable[[], None] = lambda: None,
) -> tuple[int, int]:
    """Delete every object of journal prefix ``entry`` (a listing: ``journal_prefix``); (objects,
    bytes) deleted. Deletes are idempotent, so a run cut short is finished by running it again
    on a new listing. ``on_deleted(size)`` after each object (progress). The caller decides
    whether the journal may go (its node is retired); keys from before journal ids never do.
    ``before_batch()`` runs before each ``DELETERS`` objects and may raise to stop the delete
    there: the caller's guard, asked again while a long delete runs (the node's lease taken
    back meanwhile)."""
    check_journal_id(entry.journal)
    # its shared log first (``shared_log.py``: beside the prefix, not in its listing), so a run
    # cut short leaves the prefix that names the journal
    # The adoption's marker stays (a few hundred bytes): it is what refuses the lost node's
    # stale journal if that node comes back with its disk (``shared_log.attach``), and its chunks
    # are about to go (review21c)
    log = f"{LOG_ROOT}/{entry.workspace}/{JOURNAL_DIR}{entry.journal}/"
    kept = f"{log}{ADOPTED}"
    records = {info.key: info.size for info in store.list(log) if info.key != kept}
    _delete_all(store, records, lambda n: None, before_batch)
    deleted = _delete_all(store, entry.sizes, on_deleted, before_batch)
    if isinstance(store, LocalStore):  # a local tier keeps the emptied directories: remove them
        _remove_empty_dirs(store.root / log, log)
        _remove_empty_dirs(store.root / entry.prefix, entry.prefix)
    return entry.objects, deleted


def marked_folder(store: ObjectStore, entry: JournalPrefix) -> str | None:
    """The flushed folder the marker of ``entry`` names (found non-empty by an earlier run),
    or None (no marker, or none found yet)."""
    if not entry.forgotten:
        return None
    try:
        return json.loads(store.read(entry.marker)).get("flushed_url")
    except ObjectNotFound:
        return None
    except ValueError as exc:
        raise StorageError(
            f"the marker {entry.marker} of journal {entry.journal} of workspace {entry.workspace!r} "
            f"is not what forget-journal writes ({exc}); delete it by hand and run again"
        ) from exc


def mark_forgotten(store: ObjectStore, entry: JournalPrefix, flushed_url: str | None) -> None:
    """Write the marker of ``entry`` before a delete (``flushed_url``: its flushed folder, if
    found non-empty), so the prefix outlives the delete of its other objects."""
    check_journal_id(entry.journal)
    body = {"workspace": entry.workspace, "journal": entry.journal, "flushed_url": flushed_url}
    store.put(entry.marker, json.dumps(body, sort_keys=True).encode())
    entry.forgotten = True


def drop_marker(store: ObjectStore, entry: JournalPrefix) -> None:
    """Delete the marker of ``entry``: the last object of the prefix."""
    check_journal_id(entry.journal)
    store.delete(entry.marker)
    entry.forgotten = False
    if isinstance(store, LocalStore):
        _remove_empty_dirs(store.root / entry.prefix, entry.prefix)


def _delete_all(
    store: ObjectStore,
    sizes: dict[str, int],
    on_deleted: Callable[[int], None],
    before_batch: Callable[[], None],
) -> int:
    """Delete every key of ``sizes`` from ``store``, ``DELETERS`` at a time; bytes deleted."""
    keys = sorted(sizes)

    def delete(key: str) -> int:
        store.delete(key)
        return sizes[key]

    deleted = 0
    with ThreadPoolExecutor(DELETERS) as pool:
        for start in range(0, len(keys), DELETERS):  # a batch at a time: an error stops it there
            before_batch()
            for size in pool.map(delete, keys[start : start + DELETERS]):
                on_deleted(size)  # in this thread, in key order
                deleted += size
    return deleted


def _remove_empty_dirs(top: Path, prefix: str) -> None:
    """Remove ``top`` and its directories that hold no file, bottom up (one that does, an
    object written since the listing, stays for the next run)."""
    for directory, _subdirs, _files in os.walk(top, topdown=False):
        try:
            os.rmdir(directory)
        except FileNotFoundError:
            pass
        except OSError as exc:
            if exc.errno != errno.ENOTEMPTY:
                raise StorageError(f"cannot remove directory {directory} of {prefix}: {exc}") from exc
