"""The write-back profile: durable workspaces on the shared tier, flushed to the origin.

``open_workspace(name, config, stores)`` gives a writable path-based namespace (see
``workspace.py``); ``flush_workspace`` flushes one from any process (asking the owner when
another process holds it open); ``docs/writeback.md`` explains the design and its limits.
"""

from __future__ import annotations

import itertools
import logging
import secrets
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path

from datahub.cache.scheduler import process_scheduler
from datahub.config import Config
from datahub.errors import Conflict, InvalidInput, NotFound
from datahub.validation import check_name
from datahub.writeback import records, shared_log
from datahub.writeback.chunks import JOURNAL_DIR, ChunkStore, abort_unfinished_uploads
from datahub.writeback.files import FileHandle
from datahub.writeback.flusher import FlushedObject, Flusher, FlushReport, Progress, dirty_summary
from datahub.writeback.journal import (
    COVER_EPOCH,
    COVERED,
    JOURNAL_ID,
    OBJECTS_PREFIX,
    OWNER_BOOT,
    Journal,
    Txn,
)
from datahub.writeback.lease import LEASE_TTL, LeasePort, WriterLease
from datahub.writeback.model import new_record
from datahub.writeback.owner import FlushServer, OwnerLock, is_locked, request_flush, socket_path
from datahub.writeback.packs import new_cover_key
from datahub.writeback.workspace import FileAttr, Workspace

__all__ = [
    "FileAttr",
    "FileHandle",
    "FlushReport",
    "FlushedObject",
    "Workspace",
    "flush_workspace",
    "journal_objects_url",
    "list_workspaces",
    "open_workspace",
    "workspace_dir",
    "workspace_stats",
    "writer_lease",
]

log = logging.getLogger(__name__)
SHARED_PREFIX = "writeback"
DEFAULT_BUFFER_BYTES = 64 * 1024**2
CHUNK_UPLOAD_CONCURRENCY = 8
# the writer lease each open workspace holds (``open_workspace``), for ``writer_lease``
_LEASES: weakref.WeakKeyDictionary[Workspace, WriterLease] = weakref.WeakKeyDictionary()


def writer_lease(ws: Workspace) -> WriterLease | None:
    """The writer lease ``ws`` was opened under, None for one opened without (the flock only).
    Why: what a workspace may do beyond its own node (adopt another node's journal,
    ``adopt.py``) needs the single-writer promise, which the flock alone does not give."""
    return _LEASES.get(ws)


def workspace_dir(config: Config, name: str) -> Path:
    return config.resolved_journal_dir / "workspaces" / name


def default_target(config: Config, name: str) -> str:
    """Where workspace ``name`` flushes unless opened with a ``target_url`` of its own."""
    return f"{config.resolved_objects_url.rstrip('/')}/workspaces/{name}"


def journal_objects_url(target: str, journal_id: str) -> str:
    """The folder of one journal's objects under flush target ``target``: ``<target>/j-<id>``.

    Why a folder per journal: journals are node-local, and the same workspace opened on
    another node (a CSI pod rescheduled while this node was down) is another journal. Named
    by workspace alone, its flush overwrote or deleted this journal's objects, and a file this
    journal had evicted from the shared tier lived nowhere else: its acknowledged bytes were
    gone (nodeloss18). Journal ids are random (64 bits), so no two journals write one name."""
    return f"{target.rstrip('/')}/{JOURNAL_DIR}{journal_id}"


def list_workspaces(config: Config) -> list[str]:
    root = config.resolved_journal_dir / "workspaces"
    return sorted(p.name for p in root.iterdir() if (p / "lmdb").is_dir()) if root.is_dir() else []


def workspace_stats(config: Config) -> Iterator[dict]:
    """Dirty files/bytes, pending deletes and flush lag of every workspace, read from the
    journals without opening the workspaces (``datahub cache stats``; works while a mount
    holds them, since LMDB allows concurrent readers in other processes)."""
    for name in list_workspaces(config):
        journal = Journal(workspace_dir(config, name) / "lmdb", f"workspace {name!r}", readonly=True)
        try:
            with journal.read() as txn:
                yield {
                    **dirty_summary(name, txn, time.time()),
                    "open": is_locked(workspace_dir(config, name)),
                }
        finally:
            journal.close()


def open_workspace(
    name: str,
    config: Config,
    stores,  # datahub.storage.StoreRegistry
    *,
    target_url: str | None = None,
    clock: Callable[[], float] = time.time,
    buffer_bytes: int | None = None,
    background: bool = True,
    lease: LeasePort | None = None,
    lease_ttl: float = LEASE_TTL,
    commit_to: str = "",
) -> Workspace:
    """Open (or create) workspace ``name`` for writing; replays the journal after a crash.

    ``target_url`` is where flushed files go (default ``<objects_url>/workspaces/<name>``),
    each journal in a folder of its own, ``<target>/j-<journal id>/<path>``
    (``journal_objects_url``; a journal made before keeps flushing straight under its target);
    it is fixed at creation. ``background=False`` runs no flusher thread and no flush
    server (one-shot tools). Raises Conflict naming the PID if another process has it open.
    ``lease``: where the workspace's writer lease lives (the catalog store, shared by every
    node that may open it; ``lease.py``), held for ``lease_ttl`` s at a time: Conflict naming
    the holder if another node has it, and writes stop (EIO) if it is lost. None: the flock
    only (one machine, no catalog). ``commit_to``: the dataset the caller commits the workspace
    into, named in the lease (a server lets only its writers take it; "": none, or the one the
    lease already names).
    """
    check_name(name, "workspace")
    what = f"workspace {name!r}"
    directory = workspace_dir(config, name)
    lock = OwnerLock(directory, what)
    closers: list[Callable[[], None]] = [lock.release]
    try:
        held = (
            WriterLease(lease, name, what, directory, ttl=lease_ttl, dataset=commit_to)
            if lease is not None
            else None
        )
        if held is not None:
            closers.insert(0, held.release)
        journal = Journal(directory / "lmdb", what)
        if held is not None:
            journal.fence = held.check
        closers.insert(0, journal.close)
        journal_id, new_id = _journal_id(journal)
        wanted = {
            "target_url": target_url or default_target(config, name),
            "shared_url": config.resolved_shared_url,
            "chunk_size": str(config.cache.page_size),
        }
        fixed = _fixed_settings(journal, wanted, what, journal_id, explicit_target=target_url is not None)
        target, chunk_size = fixed["target_url"], int(fixed["chunk_size"])
        folder = fixed[OBJECTS_PREFIX]  # "": a journal from before nodeloss18, straight under the target
        objects_url = f"{target.rstrip('/')}/{folder}" if folder else target
        shared = stores.shared_store(fixed["shared_url"])
        chunks = ChunkStore(
            shared, f"{SHARED_PREFIX}/{name}", what, config.cache.writeback_pack_bytes, journal=journal_id
        )
        closers.insert(0, chunks.close)
        ws = Workspace(
            name,
            journal,
            chunks,
            chunk_size=chunk_size,
            buffer_bytes=buffer_bytes or max(2 * chunk_size, DEFAULT_BUFFER_BYTES),
            upload_concurrency=CHUNK_UPLOAD_CONCURRENCY,
            clock=clock,
        )
        ws.flusher = Flusher(
            ws,
            stores.store(objects_url),
            "",
            interval=config.cache.flush_interval,
            shared_budget=config.cache.shared_bytes,
            high_watermark=config.cache.high_watermark,
            low_watermark=config.cache.low_watermark,
            concurrency=config.cache.origin_max_concurrency,
            scheduler=process_scheduler(
                config.cache.origin_concurrency,
                maximum=config.cache.origin_max_concurrency,
                max_bytes=config.cache.origin_max_inflight_bytes,
            ),
        )
        ws.commits.on_commit = ws.flusher.on_commit
        if held is not None:
            _LEASES[ws] = held
        ws.blobs = stores.store(config.resolved_objects_url)
        unreferenced = _recover(ws, new_id, own_folder=bool(folder))
        shared_log.attach(ws, objects_url)  # the shared log: what another node adopts (nodeloss20)
        _collect(ws, unreferenced)  # after the checkpoint: the old log may name them (review20b)
        if background:
            server = FlushServer(socket_path(directory), lambda: ws.flush().to_dict())
            closers.insert(0, server.close)
            ws.flusher.start()
            if ws.dirty(limit=1):
                ws.flusher.wake()  # a restart uploads everything acknowledged before the crash
    except BaseException:
        for closer in closers:
            closer()
        raise
    ws.closers = closers
    return ws


def _fixed_settings(
    journal: Journal, wanted: dict[str, str], what: str, journal_id: str, explicit_target: bool
) -> dict[str, str]:
    """Target URL, shared-tier URL, chunk size and the journal's objects folder are fixed when a
    workspace is created (the journal's chunk maps and origin state depend on them); later
    opens use the stored values, so a changed configuration cannot orphan acknowledged data.

    A new journal flushes under its own folder of the target (``OBJECTS_PREFIX``: ``j-<id>``,
    stored with the id itself in the creation's transaction, so the two never disagree); one
    made before stored no folder and keeps flushing straight under its target, where its
    flushed and evicted files are. An explicit target gets the folder too: two journals of
    one workspace given the same target would otherwise write the same names."""
    with journal.read() as txn:
        stored = {key: txn.meta(key) for key in (*wanted, OBJECTS_PREFIX)}
    if stored["target_url"] is None:
        created = {**wanted, OBJECTS_PREFIX: f"{JOURNAL_DIR}{journal_id}"}
        with journal.write(f"creation of {what}") as txn:
            txn.put_meta(JOURNAL_ID, journal_id)
            for key, value in created.items():
                txn.put_meta(key, value)
        return created
    if explicit_target and stored["target_url"].rstrip("/") != wanted["target_url"].rstrip("/"):
        raise InvalidInput(
            f"{what} flushes to {stored['target_url']}; it cannot be reopened with target {wanted['target_url']}"
        )
    return {
        **{key: stored[key] or value for key, value in wanted.items()},
        OBJECTS_PREFIX: stored[OBJECTS_PREFIX] or "",
    }


def _journal_id(journal: Journal) -> tuple[str, bool]:
    """This journal's id, which names its own chunk prefix in the shared tier (``chunks.py``),
    and whether it is new: made now, for recovery to store (the journal is new, or its last
    session wrote chunks straight under the workspace prefix, before journals had ids)."""
    with journal.read() as txn:
        found = txn.meta(JOURNAL_ID)
    return (found, False) if found else (secrets.token_hex(8), True)


def _recover(ws: Workspace, new_id: bool, own_folder: bool = False) -> list[str]:
    """Make the journal and the shared tier agree after a crash (or a clean stop).

    Files no longer in the namespace (unlinked while open when the process died) are
    dropped. An *unverified* record (a new file's first commit, which ran alongside its
    chunk uploads) is checked: if every chunk it names exists whole (length, and CRC where
    chunks are written in place), the flag is cleared; otherwise its close never returned,
    so the file is dropped, name and all, as if it had never been created. So is an
    *unacked* one: a created file that a namespace operation journaled empty (so that
    operation saw one namespace) and that no fsync or close of its own acknowledged since.
    Kept, it came back empty under its name after a crash, or absent when no namespace
    operation happened to run beside it: a crash's outcome depended on unrelated operations,
    and an empty file looked like a finished output (revert13). A rename of it acknowledged
    a name, not its bytes: it goes too. Chunk objects
    no committed transaction references (uploads of a dead writer, chunks of a dropped
    file, garbage not yet deleted) are deleted, and so are packs none of whose chunks is
    referenced (by ``_collect``, once this session's shared-log checkpoint is whole). We
    hold the owner lock, so no live writer can be mid-upload under our prefix.
    Only this journal's own prefix is judged (``ChunkStore.reclaimable``): nodes that share the
    shared tier and take the workspace over from each other each write under their journal's
    prefix, and another journal's unreferenced-looking chunk may be an acknowledged file it has
    not flushed yet (review16). Objects from before journal ids are never deleted as orphans.

    First, if the last session that had the journal open did not close it, the cover
    records in the packs that the journal does not hold are written again (``_replay_covers``):
    a covered first commit is acknowledged once its pack is flushed and reaches LMDB up to
    ``DEFER_SECONDS`` later (``journal.py``, "Deferred covered commits"), so a process killed
    in between lost it from the journal, and a power loss may also undo the last transaction
    that wrote such commits (its meta page is not flushed). Then this
    session gets the next cover epoch, above every number handed out before. Cover records are
    read under this journal's prefix only, and from before journal ids only when the last
    session wrote there (``new_id``: the journal gets its id now): another journal's records
    are its own files. A new id is stored by the transaction that starts the epoch, so a crash
    before it commits leaves the journal's id and ``covered`` as they were (its next open
    still reads the old packs' records, and replays the same ones again); nothing is written
    under the new prefix before.

    Transactions (recover20): the replay, then the epoch, then the records' judgement and
    then the drops each commit ``_RECOVER_BATCH`` files at a time, in that order, so LMDB
    holds one batch's dirty pages, not a page per few files of the workspace; every step is
    one the next recovery redoes or finds done after a crash between two commits (see
    ``_replay_covers`` and ``_judge_records``). Nothing else runs meanwhile: the owner lock
    is held, and the flusher and the flush server start after.

    After a crash, the multipart uploads left unfinished under the journal's own chunk prefix
    and, ``own_folder``, its own flush folder (``<target>/j-<id>``; a journal from before
    nodeloss18 flushes straight under the target, beside other journals' folders, and is left
    alone) are aborted (``chunks.abort_unfinished_uploads``): nothing of this journal is
    uploading now, so they are parts of a dead process's uploads (wbgaps25).
    """
    sizes = dict(ws.chunks.objects())
    boot = _boot_id()
    with ws.journal.read() as txn:
        unclean = txn.meta(OWNER_BOOT) not in (None, "")  # crashed, or the machine did
        key = txn.meta(records.COVER_KEY)
    ws.chunks.cover_key = bytes.fromhex(key) if key else None  # the last session's records'
    if unclean:
        ours = {key: n for key, n in sizes.items() if new_id or ws.chunks.reclaimable(key)}
        _replay_covers(ws, ours)
        if ws.chunks.journal:  # its own prefix (without an id, the workspace's: other journals' too)
            abort_unfinished_uploads(ws.chunks.store, ws.chunks.prefix + "/", f"the shared tier of {ws.what}")
        if own_folder:
            abort_unfinished_uploads(ws.flusher.origin, "", f"the flush folder of {ws.what}")
    with ws.journal.write(f"recovery of {ws.what}") as txn:
        if new_id:
            txn.put_meta(JOURNAL_ID, ws.chunks.journal)
            log.info("%s: chunks of this journal go under %s in the shared tier", ws.what, ws.chunks.prefix)
        last = txn.meta(COVER_EPOCH)
        epoch = int(last or 0) + 1
        if txn.meta(records.COVER_SEEDED) is None:  # this session is the first to seed its records
            txn.put_meta(records.COVER_SEEDED, str(epoch if last is not None else 0))
        txn.put_meta(records.COVER_PLACED, str(epoch))  # this session places its pack records
        if txn.meta(records.COVER_KEY) is None:  # the first session since wbgaps25: its key
            txn.put_meta(records.COVER_KEY, new_cover_key().hex())
        txn.put_meta(records.COVER_KEYED, str(epoch))  # and keys them (``packs.COVER_MAGIC_KEYED``)
        txn.put_meta(COVER_EPOCH, str(epoch))
        txn.put_meta(COVERED, str(epoch << 32))
        # never equal to a boot id: a version before smallsync19 replays the packs' records only
        # when the stored boot differs from its own (a kill lost nothing then); after a kill of
        # this session it must replay the deferred commits too, not start a new epoch above them
        txn.put_meta(OWNER_BOOT, f"{boot} {DEFERRING}")
    with ws.journal.read() as txn:
        named = _named_ids(txn)
        key = txn.meta(records.COVER_KEY)
    ws.chunks.cover_key = bytes.fromhex(key)  # this session's records are keyed
    used, objects, dropped = _judge_records(ws, named, sizes)
    del named
    if dropped:
        _drop_all(ws, dropped)
    ws.journal.start_covers(epoch << 32)
    ws.flusher.used = used
    return [key for key in sizes if key not in objects and ws.chunks.reclaimable(key)]


def _collect(ws: Workspace, unreferenced: list[str]) -> None:
    """Delete what recovery found unreferenced, and the journal's garbage: only once this
    session's shared-log checkpoint is whole (``shared_log.attach``). Why (review20b): until
    then the newest whole log is the last session's, and a record of it may name a chunk LMDB
    does not (its transaction was killed between the record's landing and LMDB's commit);
    deleted, that chunk made an adoption of the lost node refuse every file it acknowledged
    (review20d found the same with an open that died before its checkpoint)."""
    ws.delete_unreferenced(unreferenced)
    ws.flusher.gc()


# file records recovery reads and judges per batch, each batch in a write transaction of its
# own (recover19: a cursor per batch; recover20: a commit per batch): it holds this many decoded
# records at a time, and LMDB this many records' dirty pages, not one per file of the workspace
_RECOVER_BATCH = 4096


def _named_ids(txn: Txn) -> bytearray:
    """A bitmap of the file ids the namespace names: one bit per id, where a dict of every
    path per id held 2.2 GiB at 10^6 files (recover19). Paths are looked up again only for
    the few files recovery drops (``_drop_all``)."""
    bits = bytearray()
    for _path, file_id in txn.tree_files():
        byte = file_id >> 3
        if byte >= len(bits):
            bits.extend(bytes(max(byte + 1 - len(bits), len(bits))))
        bits[byte] |= 1 << (file_id & 7)
    return bits


def _has(bits: bytearray, file_id: int) -> bool:
    byte = file_id >> 3
    return byte < len(bits) and bool(bits[byte] & (1 << (file_id & 7)))


def _judge_records(
    ws: Workspace, named: bytearray, sizes: dict[str, int]
) -> tuple[int, set[str], dict[int, bool]]:
    """Apply ``_recover``'s rules to every file record, ``_RECOVER_BATCH`` at a time, each batch
    read and written in a transaction of its own: records without a name are deleted (their
    chunks to garbage), unverified ones checked (the flag cleared when whole); referenced
    chunks are adopted a batch at a time. Returns the bytes used, the shared-tier objects
    (chunks, or packs) the kept records reference, and the files to drop name and all
    (id -> True: unacked, False: a torn first close), few: their names are found after.

    Why a commit per batch: a fresh workspace's every record is unverified until its flush
    (``flusher.py``, the lazy clearing), so the open rewrote every record, and the one
    transaction that held them all kept a dirty page per few records in memory until it
    committed: 450 MiB at 10^6 files (recover20). Each batch's changes stand alone, so a crash
    between two commits leaves a journal the next recovery judges the same way: a deleted
    nameless record stays deleted (its chunks listed as garbage in the same commit), a
    cleared flag was cleared after its chunks were found whole, and what is left is judged
    again."""
    used = 0
    objects: set[str] = set()
    dropped: dict[int, bool] = {}
    after: int | None = None
    while True:
        referenced: list[str] = []
        with ws.journal.write(f"recovery of {ws.what}") as txn:
            scan = txn.files_after(after)
            try:
                batch = list(itertools.islice(scan, _RECOVER_BATCH))
            finally:
                scan.close()  # its cursor too, before this batch's writes
            for file_id, rec in batch:
                keys = [k for k, _ in rec["chunks"].values()]
                if not _has(named, file_id):
                    txn.del_file(file_id)
                    txn.add_garbage(keys)
                    continue
                if rec.get("unacked"):  # created, journaled empty by a namespace operation, never
                    # acknowledged by a commit of its own: what a crash loses (see the docstring)
                    dropped[file_id] = True
                    continue  # its chunks (none: it is empty) are unreferenced now
                if rec.get("unverified"):
                    if all(ws.chunks.intact(key, n, fp, sizes) for key, (n, fp) in rec["unverified"].items()):
                        del rec["unverified"]
                        txn.put_file(file_id, rec)
                    else:
                        dropped[file_id] = False
                        continue  # its chunks are unreferenced now: deleted below
                referenced.extend(keys)
                used += sum(n for _, n in rec["chunks"].values())
        if not batch:
            return used, objects, dropped
        after = batch[-1][0]
        del batch
        ws.chunks.adopt(referenced)
        objects.update(ws.chunks.object_of(key) for key in referenced)  # a chunk, or its pack


def _drop_all(ws: Workspace, dropped: dict[int, bool]) -> None:
    """Drop the files recovery judged lost, name and all (one more scan of the namespace, for
    their names only: there are few), ``_RECOVER_BATCH`` files a transaction."""
    paths: dict[int, list[str]] = {}
    with ws.journal.read() as txn:
        for path, file_id in txn.tree_files():
            if file_id in dropped:
                paths.setdefault(file_id, []).append(path)
    items = iter(dropped.items())
    while batch := list(itertools.islice(items, _RECOVER_BATCH)):
        with ws.journal.write(f"recovery of {ws.what}") as txn:
            for file_id, _unacked in batch:
                _drop_named(txn, file_id, paths.get(file_id, []))
        for file_id, unacked in batch:  # logged once committed
            names = ", ".join(map(repr, paths.get(file_id, [])))
            if unacked:
                log.info("recovery of %s: dropped %s, created and never fsynced or closed", ws.what, names)
            else:
                log.warning(
                    "recovery of %s: dropped %s, whose first close never completed (a chunk is "
                    "missing or torn)", ws.what, names,
                )  # fmt: skip


def _drop_named(txn: Txn, file_id: int, paths: list[str]) -> None:
    """Drop a file nothing of which survives recovery, name and all, as if never created."""
    txn.del_file(file_id)
    for path in paths:
        txn.del_entry(path)


def _replay_covers(ws: Workspace, sizes: dict[str, int]) -> None:
    """Write again the first commits whose cover records (``packs.py``) are numbered above the
    last ``covered`` the journal holds: they were in the transaction the power loss undid (or
    their commit never ran: their close never returned, and keeping a file whose bytes are
    whole is allowed). A record at or below it was committed by a transaction that is still
    there, so its file was removed since and stays removed. Reads every pack once, and holds
    only the records above ``covered``.

    Committed ``_RECOVER_BATCH`` records a transaction, in cover order, all before the
    transaction that moves ``covered`` to the new session's epoch (``_recover``): until that
    one commits, a crash leaves ``covered`` where it was, and the next open replays the same
    records again; those already written find their id taken and are skipped
    (``records.replay_cover``)."""
    with ws.journal.read() as txn:
        covered = int(txn.meta(COVERED) or 0)
        epoch = int(txn.meta(COVER_EPOCH) or 0)
    # only those above ``covered`` are held (the others are skipped anyway): a list of every
    # record was one per file of the workspace (recover19)
    above = sorted(
        (kr for kr in ws.chunks.cover_records(sizes) if kr[1]["c"] > covered), key=lambda kr: kr[1]["c"]
    )
    for start in range(0, len(above), _RECOVER_BATCH):
        with ws.journal.write(f"recovery of {ws.what}") as txn:
            wrote, foreign = [], []
            for key, cover in above[start : start + _RECOVER_BATCH]:
                if not records.cover_is_ours(txn, cover, epoch):
                    foreign.append((key, cover["path"]))
                elif records.replay_cover(txn, key, cover, new_record(cover["mtime"])):
                    wrote.append(cover["path"])
        for key, path in foreign:
            log.warning(
                "recovery of %s: left out a record of %r at %s that this journal never wrote (its "
                "file id or cover number was never handed out here: bytes of a file that hold a "
                "record, such as a copy of a pack file)", ws.what, path, key,
            )  # fmt: skip
        for path in wrote:
            log.warning(
                "recovery of %s: wrote %r again from its record in the shared tier (the journal "
                "did not hold its first close: a crash or a power loss)", ws.what, path,
            )  # fmt: skip


# what the owner's boot id is stored with (``_recover``): a session that defers covered commits
DEFERRING = "deferring"


def _boot_id() -> str:
    """This boot of the machine (a power loss or a reboot gives another)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def flush_workspace(
    name: str, config: Config, stores, *, progress: Progress | None = None, lease: LeasePort | None = None
) -> FlushReport:
    """Flush workspace ``name`` from any process: ask its owner, or open it and flush here,
    under its writer lease (``lease``: the catalog's store) as every writer's open takes it, so
    a node that lost the workspace to another never pushes over the new holder's files."""
    check_name(name, "workspace")
    what = f"workspace {name!r}"
    directory = workspace_dir(config, name)
    if not (directory / "lmdb").is_dir():
        raise NotFound(f"{what} does not exist under {config.resolved_journal_dir}", workspace=name)
    refused: Conflict | None = None
    for _attempt in range(3):
        if is_locked(directory):
            return FlushReport.from_dict(request_flush(socket_path(directory), what))
        try:
            ws = open_workspace(name, config, stores, background=False, lease=lease)
        except Conflict as exc:  # opened by someone else just now (ask them), or leased elsewhere
            refused = exc
            continue
        with ws:
            return ws.flush(progress=progress)
    raise refused or Conflict(f"{what} changed owner repeatedly while trying to flush it; retry")
