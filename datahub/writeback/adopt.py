"""Adoption: a journal lost with its node rebuilt from the shared tier alone, taken as one's own.

Why: a node that dies takes its journal (LMDB, on the node's disk) with it, and with it the
only names of its acknowledged files that were not flushed yet. Their bytes are in the shared
tier, and since nodeloss20 so is every acknowledging journal change (``shared_log.py``).
``adopt_journal(ws, journal_id)`` reads the lost journal's log and cover records, checks every
chunk its files name, and writes those files into ``ws`` (this node's workspace, under its
lease) as new acknowledged files of its own; its flusher and commits then treat them as any.

The steps, each safe to run again:
0. ``ws`` holds its writer lease (``_check_lease``; lognext21), and the lost holder can
   acknowledge nothing more (after a break ``--at-once`` the CLI waits for its fence first,
   ``await_fenced``);
1. the lost journal's state: the newest whole checkpoint, its session's records in order up
   to the first missing one (voided ones left out), then the cover records numbered above the
   last ``covered`` (new small files whose first commit had not reached LMDB); the log
   header's flush folder must be the one this workspace's target gives that journal
   (``_objects_url``);
2. every file is checked before anything is written: each chunk exists with its length (and
   its CRC-32 where one was recorded), an evicted file's object has its etag. A first commit
   whose chunk is missing or torn never returned (its file is left out, as recovery drops
   it); any other file whose bytes cannot be proven whole fails the adoption, with nothing
   written, unless ``partial``: then it is left out and listed (report, marker), and so are
   its merge-base entries;
3. the marker ``writeback-log/<workspace>/j-<id>/adopted`` is written (this journal's id, not done): the lost
   journal's own next open is refused from now on, and another journal's adoption needs
   ``force``;
4. directories and files are written through ``ws`` (each file acknowledged by its close, as
   any: a crash midway leaves whole files only), then the lost journal's commit merge bases
   (``committed:``, so a commit deletes what that journal had committed and removed since);
5. the marker says done. A second run after a crash in 4 writes the same files again;
6. the multipart uploads the lost journal left unfinished (killed mid-flush) under its own
   chunk prefix and flush folder are aborted (``_abort_uploads``; best effort, wbgaps25).
"""

from __future__ import annotations

import json
import logging
import re
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from datahub.commit_base import BASE_META, UNSETTLED
from datahub.errors import AlreadyExists, Conflict, DatahubError, InvalidInput, NotFound, StorageError
from datahub.storage import parse_url
from datahub.writeback import journal_objects_url, writer_lease
from datahub.writeback.chunks import ChunkStore, abort_unfinished_uploads
from datahub.writeback.journal import _tree_path
from datahub.writeback.lease import LEASE_TTL
from datahub.writeback.records import must_be_placed
from datahub.writeback.shared_log import ADOPTED, LogState, encode, log_prefix, read_log
from datahub.writeback.shared_log import _read as read_object
from datahub.writeback.workspace import Workspace

log = logging.getLogger(__name__)
_JOURNAL_ID = re.compile(r"[0-9a-f]{1,64}")  # ``secrets.token_hex(8)`` makes 16 of these


@dataclass
class AdoptReport:
    """What an adoption took: for the CLI and the log."""

    journal: str
    files: list[str] = field(default_factory=list)
    directories: int = 0
    bytes: int = 0
    dropped: list[str] = field(default_factory=list)  # first closes that never returned
    covers: int = 0  # small files rebuilt from cover records
    records: int = 0  # log records after the checkpoint
    already: bool = False
    # acknowledged files whose bytes cannot be proven whole ({"path", "why"}): adopted without
    # them only with ``partial``; also kept in the adoption marker, in the shared tier
    not_adopted: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class _File:
    path: str
    size: int
    chunks: dict[int, tuple[str, int]]
    src: dict | None


def adopt_journal(
    ws: Workspace,
    journal_id: str,
    stores,
    *,
    force: bool = False,
    replace: bool = False,
    partial: bool = False,
) -> AdoptReport:
    """Take lost journal ``journal_id``'s acknowledged files into ``ws`` (module docstring).
    ``stores``: a ``StoreRegistry``, for the lost journal's flushed objects (an evicted file).
    ``ws`` must hold its writer lease (opened with the catalog the nodes share): Conflict
    otherwise. Raises NotFound (no log), Conflict (adopted by another journal; ``force``
    overrides; or a file of ``ws`` holds other bytes at a path the lost journal has: ``replace``
    lets the lost journal's win; or the log's header names another flush folder than this
    workspace's for that journal), StorageError (an acknowledged file's bytes cannot be proven
    whole: a chunk missing or short, its flushed object gone or changed): nothing written then,
    unless ``partial``, which adopts every whole file and lists the others in the report and in
    the adoption marker (``not_adopted``: path, why)."""
    own = ws.chunks.journal
    if not _JOURNAL_ID.fullmatch(journal_id or ""):
        raise InvalidInput(
            f"{journal_id!r} is not a journal id (hex digits, as `datahub cache journals` shows)"
        )
    if journal_id == own:
        raise InvalidInput(f"journal {journal_id!r} is {ws.what}'s own journal here; adopt another node's")
    _check_lease(ws, journal_id)
    lost = ChunkStore(
        ws.chunks.store, ws.chunks.workspace_prefix, f"journal {journal_id} of {ws.what}", 0, journal_id
    )
    try:
        return _adopt(ws, lost, stores, force, replace, partial)
    finally:
        lost.close()


def _check_lease(ws: Workspace, journal_id: str) -> None:
    """Conflict unless ``ws`` holds its writer lease now. Why (lognext21): the flock alone keeps
    one writer per node, not per workspace; adopted without the lease, the lost node (alive
    after all, or back) or a third could write the workspace meanwhile: two writers flushing
    over each other, and the lost node's files written on where the adoption no longer looks."""
    held = writer_lease(ws)
    doing = f"adoption of journal {journal_id} into {ws.what}"
    if held is None:
        raise Conflict(
            f"{doing} refused: {ws.what} was opened without its writer lease (no catalog shared by "
            "the nodes: an SQLite catalog file that does not exist, or none configured), so nothing "
            "keeps the lost node or another from writing it meanwhile; point catalog_url (--catalog, "
            "$DATAHUB_CATALOG_URL) at the catalog the nodes share and adopt again (nothing was adopted)",
            workspace=ws.name,
            journal=journal_id,
        )
    held.check(doing)


def _adopt(ws: Workspace, lost: ChunkStore, stores, force: bool, replace: bool, partial: bool) -> AdoptReport:
    journal_id, own = lost.journal, ws.chunks.journal
    report = AdoptReport(journal_id)
    marker_key = f"{log_prefix(lost)}/{ADOPTED}"
    marker = read_object(lost.store, marker_key)
    if marker is not None and marker.get("by") != own and not force:
        raise Conflict(
            f"journal {journal_id} of {ws.what} was adopted by journal {marker.get('by')} "
            f"({marker.get('host')}, {'done' if marker.get('done') else 'not finished'}): its files are "
            "that journal's; if that run did not finish, run it again there. To adopt it here too "
            "(the files then in both journals), pass --force (force=True); nothing was adopted",
            workspace=ws.name,
            journal=journal_id,
        )
    if marker is not None and marker.get("by") == own and marker.get("done"):
        report.already = True
        report.not_adopted = list(marker.get("not_adopted") or [])  # what that run left out
        return report
    state = read_log(lost)
    if state is None:
        raise NotFound(
            f"journal {journal_id} of {ws.what} has no whole log in the shared tier (made before "
            "nodeloss20, or never opened since): its files cannot be rebuilt from the shared tier"
        )
    report.records = state.records
    objects_url = _objects_url(ws, lost, state.header)
    sizes = dict(lost.objects())  # its own chunks, and any from before journal ids it names
    own_sizes = {key: n for key, n in sizes.items() if key.startswith(lost.prefix + "/")}
    tree, files, committed = _rebuild(state, lost, own_sizes, report)
    origin = stores.store(objects_url) if any(f.get("src") for f in files.values()) else None
    chunk_size = int(state.header["chunk_size"])
    plan = _check(ws, lost, tree, files, sizes, origin, report)
    if report.not_adopted and not partial:
        resumed = marker is not None and marker.get("by") == own  # an earlier run wrote some
        raise StorageError(_unproven(ws, lost, report.not_adopted, resumed), journal=lost.journal)
    plan = _unless_here(ws, lost, plan, origin, chunk_size, report, replace)
    writer_lease(ws).check(f"adoption of journal {journal_id} into {ws.what}")  # type: ignore[union-attr]
    _mark(lost, marker_key, own, done=False, not_adopted=report.not_adopted)
    for path in sorted(p for p, e in tree.items() if e["t"] == "d"):
        try:
            ws.mkdir(path)
            report.directories += 1
        except AlreadyExists:
            pass
    for item in plan:
        _copy(ws, lost, item, origin, chunk_size)
        report.files.append(item.path)
        report.bytes += item.size
    committed = _without(committed, {item["path"] for item in report.not_adopted})
    if committed:
        with ws.journal.write(f"adoption of journal {journal_id} by {ws.what}") as txn:
            for name, value in committed.items():
                txn.put_meta(name, _union(name, txn.meta(name), value))
    _mark(lost, marker_key, own, done=True, not_adopted=report.not_adopted)
    _abort_uploads(ws, lost, stores, objects_url)
    log.warning(
        "%s: adopted journal %s from the shared tier: %d files (%d bytes), %d directories; left out "
        "(first close never returned): %s; not adopted (bytes not whole): %s", ws.what, journal_id,
        len(report.files), report.bytes, report.directories,
        ", ".join(map(repr, report.dropped)) or "none",
        ", ".join(f"{item['path']!r} ({item['why']})" for item in report.not_adopted) or "none",
    )  # fmt: skip
    return report


def _abort_uploads(ws: Workspace, lost: ChunkStore, stores, objects_url: str) -> None:
    """Abort the multipart uploads the lost journal left unfinished (killed mid-flush): under its
    own chunk prefix, and under its flush folder when that is its own (``<target>/j-<id>``; a
    journal from before nodeloss18 flushed straight under the target, beside other journals'
    folders: left alone). Nothing of it uploads any more: its holder is fenced (step 0), and
    its files are this journal's now, uploaded from here (wbgaps25)."""
    with ws.journal.read() as txn:
        target = txn.meta("target_url") or ""
    what = f"journal {lost.journal} of {ws.what} (adopted)"
    abort_unfinished_uploads(lost.store, lost.prefix + "/", f"the shared tier of {what}")
    if objects_url.rstrip("/") == journal_objects_url(target, lost.journal).rstrip("/"):
        abort_unfinished_uploads(stores.store(objects_url), "", f"the flush folder of {what}")


def _rebuild(
    state: LogState, lost: ChunkStore, sizes: dict[str, int], report: AdoptReport
) -> tuple[dict[str, dict], dict[int, dict], dict[str, str]]:
    """The lost journal's namespace, file records and merge bases: the log's rows, then the
    cover records above its ``covered`` written as their first commits wrote them."""
    tree: dict[str, dict] = {}
    files: dict[int, dict] = {}
    committed: dict[str, str] = {}
    covered = 0
    for (db, key), value in state.rows.items():
        if db == "tree":
            tree[_tree_path(key)] = json.loads(value)
        elif db == "files":
            files[int.from_bytes(key, "big")] = json.loads(value)
        elif key == b"covered":
            covered = int(value)
        else:
            committed[key.decode()] = value.decode()
    # unseeded records (from before cover22) only of the epochs before the log's session
    # seeded its own; a log written before cover22 has no ``cover_seeded``: all are unseeded.
    # Unplaced ones (a pack's, from before cover24) only of an epoch above the ``cover_placed``
    # of the log's session (``records.must_be_placed``); a log from before cover24 has none
    # Unkeyed ones (from before wbgaps25) only of an epoch above its ``cover_keyed``: the log's
    # header holds the key that verifies the others (``cover_key``)
    unseeded_below = int(state.header.get("cover_seeded", 1 << 32))
    placed = state.header.get("cover_placed")
    keyed = state.header.get("cover_keyed")
    key = state.header.get("cover_key")
    lost.cover_key = bytes.fromhex(key) if key else None
    above = (
        kr
        for kr in lost.cover_records(sizes)
        if kr[1]["c"] > covered
        and (kr[1].get("seeded") or kr[1]["c"] >> 32 < unseeded_below)
        and (kr[1].get("placed") or not must_be_placed(kr[1]["c"] >> 32, placed))
        and (kr[1].get("keyed") or not must_be_placed(kr[1]["c"] >> 32, keyed))
    )
    for key, cover in sorted(above, key=lambda kr: kr[1]["c"]):
        path, file_id = cover["path"], cover["id"]
        parent = path.rpartition("/")[0]
        if file_id in files or path in tree or (parent and tree.get(parent, {}).get("t") != "d"):
            continue  # not the first commit of a file the log lacks
        files[file_id] = {
            "size": cover["size"], "gen": 1, "chunks": {"0": [key, cover["len"]]},
            "unverified": {key: [cover["len"], cover["crc"]]},
        }  # fmt: skip
        tree[path] = {"t": "f", "id": file_id}
        report.covers += 1
    return tree, files, committed


def _check(
    ws: Workspace,
    lost: ChunkStore,
    tree: dict[str, dict],
    files: dict[int, dict],
    sizes: dict[str, int],
    origin,
    report: AdoptReport,
) -> list[_File]:
    """Every file to adopt, each chunk checked (module docstring, step 2); nothing written."""
    plan: list[_File] = []
    for path, entry in tree.items():  # what the adopter has at a path must be of the same kind
        try:
            here = ws.stat(path)
        except NotFound:
            continue
        if here.is_dir != (entry["t"] == "d"):
            kind = "a directory" if here.is_dir else "a file"
            raise Conflict(
                f"{path!r} is {kind} in {ws.what} here but not in journal {lost.journal}; move it "
                "aside and adopt again (nothing was adopted)", path=path,
            )  # fmt: skip
    for path in sorted(p for p, e in tree.items() if e["t"] == "f"):
        rec = files.get(tree[path]["id"])
        if rec is None or rec.get("unacked") or rec.get("unlinked"):
            continue  # created and never acknowledged (or a name without a record)
        unverified = rec.get("unverified") or {}
        if not all(lost.intact(key, n, fp, sizes) for key, (n, fp) in unverified.items()):
            report.dropped.append(path)
            continue
        chunks = {int(i): (k, n) for i, (k, n) in rec["chunks"].items()}
        why = _unwhole(lost, chunks, unverified, sizes)
        src = rec.get("src")
        if why is None and src and origin is not None:
            why = _unflushed(origin, src)
        if why is not None:
            report.not_adopted.append({"path": path, "why": why})
            continue
        plan.append(_File(path, rec["size"], chunks, src))
    return plan


def _unwhole(
    lost: ChunkStore, chunks: dict[int, tuple[str, int]], unverified: dict, sizes: dict[str, int]
) -> str | None:
    """Why a file's acknowledged chunks are not all there whole, or None."""
    for index, (key, length) in sorted(chunks.items()):
        if key not in unverified and not lost.intact(key, length, None, sizes):
            return f"chunk {index} ({key}) is missing or short in the shared tier"
    return None


def _unflushed(origin, src: dict) -> str | None:
    """Why an evicted file's flushed object cannot give its bytes back, or None."""
    if not _relative(src.get("path", "")):
        return f"its flushed object's name {src.get('path')!r} is not a path under the journal's folder"
    try:
        info = origin.stat(src["path"])
    except DatahubError as exc:
        return f"its bytes live only in its flushed object {src['path']!r}, which cannot be read ({exc})"
    if info.etag != src["etag"]:
        return f"its flushed object {src['path']!r} changed since that journal evicted it"
    return None


def _relative(path: str) -> bool:
    """A plain relative path (no empty, ``.`` or ``..`` part): what a flusher names an object."""
    return bool(path) and all(part not in ("", ".", "..") for part in path.split("/"))


def _unproven(ws: Workspace, lost: ChunkStore, items: list[dict], resumed: bool) -> str:
    """``resumed``: an earlier run of this adoption (``partial``) wrote files before it stopped;
    "nothing was adopted" would be untrue then (review21c)."""
    shown = "; ".join(f"{item['path']!r}: {item['why']}" for item in items[:10])
    more = f" (and {len(items) - 10} more)" if len(items) > 10 else ""
    done = (
        "nothing more was adopted now, but an earlier run of this adoption, interrupted, may have "
        "written some of the other files into this workspace already. Finish it with --partial"
        if resumed
        else "nothing was adopted. Adopt every other file with --partial"
    )
    return (
        f"{len(items)} file(s) acknowledged in journal {lost.journal} of {ws.what} cannot be proven "
        f"whole: {shown}{more}; {done} (partial=True): those are listed then, and kept in the "
        "adoption marker"
    )


def _objects_url(ws: Workspace, lost: ChunkStore, header: dict) -> str:
    """The lost journal's flush folder, as this workspace's configuration says it is: its
    target's ``j-<id>`` folder (or the target itself, for a journal from before nodeloss18).
    Why not the log header's word alone (lognext21): the header is in the shared tier, where
    whoever may write there may write it too; trusted, it pointed an evicted file's read at any
    bucket or prefix, and the adopted file carried bytes from elsewhere. Conflict on a mismatch."""
    with ws.journal.read() as txn:
        target = txn.meta("target_url") or ""
    named = str(header.get("objects_url", "")).rstrip("/")
    mine = journal_objects_url(target, lost.journal).rstrip("/")
    for folder in (mine, target.rstrip("/")):
        if _folder(named) is not None and _folder(named) == _folder(folder):
            return folder
    raise Conflict(
        f"the shared log of journal {lost.journal} of {ws.what} says that journal flushed to "
        f"{named or '(nothing)'}, but {ws.what} flushes to {target}, so that journal's folder is "
        f"{mine}: the log was not written by a node of this workspace as configured here (or "
        "was altered in the shared tier); nothing was adopted. Check the shared tier and the "
        "workspace's target (a node opened with another target_url is adopted from a workspace "
        "opened with that target)",
        workspace=ws.name,
        journal=lost.journal,
    )


def _folder(url: str) -> tuple[str, str, str] | None:
    """The store and folder ``url`` names, as the store registry opens it (``storage.parse_url``:
    scheme in any case, ``file://localhost/`` for ``file:///``, an S3 key decoded), None for
    no storage URL. Why (review21c): compared as strings, a lost node whose configuration spelled
    the same flush target another way wrote a header the adoption refused, and none of its
    acknowledged files could be adopted, though its evicted files' bytes were where it said."""
    try:
        scheme, authority, path = parse_url(url)
    except DatahubError:
        return None
    return scheme, authority, path.rstrip("/")


def _unless_here(
    ws: Workspace,
    lost: ChunkStore,
    plan: list[_File],
    origin,
    chunk_size: int,
    report: AdoptReport,
    replace: bool,
) -> list[_File]:
    """``plan`` without the files ``ws`` holds already with the same bytes (a run again after a
    crash); a file of ``ws`` with other bytes at such a path may be newer than the lost node's
    (written here since the takeover): refused, nothing written, unless ``replace``."""
    kept: list[_File] = []
    differ: list[str] = []
    for item in plan:
        try:
            here = ws.stat(item.path)
        except NotFound:
            kept.append(item)
            continue
        same = here.size == item.size
        if same:
            fh = ws.open(item.path)
            try:
                same = all(
                    fh.read(start, len(data)) == data
                    for start, data in _content(lost, item, origin, chunk_size)
                )
            finally:
                fh.close(commit=False)  # a reader: it acknowledges no writer's bytes (bytes31)
        if same:
            report.files.append(item.path)  # adopted by an earlier run
            report.bytes += item.size
        else:
            differ.append(item.path)
            kept.append(item)
    if differ and not replace:
        raise Conflict(
            f"{ws.what} holds other bytes than journal {lost.journal} at {', '.join(map(repr, differ[:10]))}"
            f"{' …' if len(differ) > 10 else ''}: they may be newer (written here since the takeover); "
            "move them aside, or adopt with replace (--replace) to take the lost journal's (nothing was adopted)"
        )
    return kept


def _content(lost: ChunkStore, item: _File, origin, chunk_size: int) -> Iterator[tuple[int, bytes]]:
    """(offset, bytes) of the lost journal's file ``item``, chunk by chunk (holes left out)."""
    for index in range((item.size + chunk_size - 1) // chunk_size):
        start = index * chunk_size
        if index in item.chunks:
            key, length = item.chunks[index]
            data = lost.get(key, length, item.path)
        elif item.src and start < item.src["len"] and origin is not None:
            end = min(start + chunk_size, item.src["len"])
            data = origin.read(item.src["path"], start, end, etag=item.src["etag"])
        else:
            continue  # a hole
        yield start, data[: max(0, item.size - start)]


def _copy(ws: Workspace, lost: ChunkStore, item: _File, origin, chunk_size: int) -> None:
    """Write one adopted file into ``ws``, chunk by chunk; acknowledged by its close."""
    with ws.open(item.path, create=True, truncate=True) as fh:
        for start, data in _content(lost, item, origin, chunk_size):
            fh.write(start, data)
        fh.truncate(item.size)


def _union(name: str, here: str | None, lost: str) -> str:
    """The merge-base entry ``name`` (``committed:<dataset>\0<key>``, or ``\1<sha256>``
    valued ``<key>\0<identities>``: ``commit_base.Base``) naming the records both journals
    committed there. Why not the lost journal's alone (review20b): the adopter's own record
    of what it committed at that key went, so a file it had committed there and then removed
    was no longer taken for its own by its next commit, which kept it in the dataset. A union
    is what an unsettled commit leaves (``UNSETTLED`` first: the head holding either record
    is this workspace's to delete or replace)."""
    if here is None or here == lost:
        return lost
    rest = name[len(BASE_META) :]
    cuts = [i for i in (rest.find("\0"), rest.find("\1")) if i >= 0]
    if not cuts:  # a base from before commitmem18 (one JSON object, migrated at its next use)
        return lost
    long = rest[min(cuts)] == "\1"
    key, idents_here, idents_lost = "", here, lost
    if long:
        key, _, idents_here = here.partition("\0")
        idents_lost = lost.partition("\0")[2]
    union = [i for i in idents_here.split(",") if i != UNSETTLED]
    union += [i for i in idents_lost.split(",") if i != UNSETTLED and i not in union]
    joined = ",".join([UNSETTLED, *union])
    return f"{key}\0{joined}" if long else joined


def _without(committed: dict[str, str], paths: set[str]) -> dict[str, str]:
    """The lost journal's merge-base entries but those of files not adopted: kept, they told
    the adopter's commit that a file it lacks was its own to delete, and the dataset's copy of a
    file the partial adoption left out went with it (lognext21)."""
    if not paths:
        return committed
    kept = {}
    for name, value in committed.items():
        rest = name[len(BASE_META) :]
        cut = min((i for i in (rest.find("\0"), rest.find("\1")) if i >= 0), default=-1)
        key = rest[cut + 1 :] if cut >= 0 and rest[cut] == "\0" else value.partition("\0")[0]
        if cut < 0 or key not in paths:
            kept[name] = value
    return kept


def await_fenced(ws: Workspace, port, before, ttl: float = LEASE_TTL, sleep=time.sleep) -> float:
    """Wait until the holder of ``ws``'s writer lease before this node's take (``before``: the
    lease row ``port.lease`` gave just before ``ws`` was opened, None if there was none) can
    acknowledge nothing more; returns the seconds waited. Call it before ``adopt_journal``.

    Why (lognext21): a lease broken ``--at-once`` is free at once, but its holder learns it only
    at its next renewal, and one that cannot reach the catalog acknowledges on until ``ttl -
    ttl/6`` after its last renewal began (``lease.py``). An adoption that read the log in that
    window missed the files it acknowledged meanwhile: lost once that node died. Every such
    renewal began before the break, so the holder is fenced ``ttl`` after it, on the catalog's
    clock; this node's take tells the catalog's time (its expiry minus ``ttl``). A lease that
    lapsed needs no wait (its holder fenced before its expiry, and so did one broken before it
    was taken); one released waits until ``ttl`` after its release (review21c: a third node's
    take and release after a break at once leave a released row, and the broken holder may
    acknowledge on; a release more than ``ttl`` ago needs no wait); one seen held, free by the
    take, was broken meanwhile: the whole ``ttl``. ``ttl``: the lost holder's (every node uses
    ``LEASE_TTL``)."""
    held, name = writer_lease(ws), ws.name
    now = port.lease(name) if held is not None else None
    if now is None or before is None or before.owner == held.owner:  # type: ignore[union-attr]
        return 0.0  # no lease (adopt_journal refuses), none before, or this node's own
    taken_at = now.expires - held.ttl  # type: ignore[union-attr]  # the catalog's clock at the take or a renewal since
    if before.expires <= 0:  # freed (at -expires): broken at once, or released by its holder
        # a release hides any break at once before it (review21c): a third node took the lease
        # after the break and released it, the row tells no more; the broken holder's fence is
        # before ``ttl`` after the break, so before ``ttl`` after the release
        fenced_at = -before.expires + ttl
    elif before.expires <= taken_at:
        return 0.0  # lapsed: its holder fenced before its expiry
    else:
        fenced_at = taken_at + ttl  # held when read, free by the take: broken in between
    wait = min(ttl, max(0.0, fenced_at - taken_at))
    if wait > 0:
        log.warning(
            "workspace %r: its writer lease was broken at once (or freed since less than %.0f s ago); "
            "waiting %.0f s, until a holder it was broken from can acknowledge nothing more, before "
            "reading the lost journal's log", name, ttl, wait,
        )  # fmt: skip
        sleep(wait)
    return wait


def _mark(lost: ChunkStore, key: str, by: str, *, done: bool, not_adopted: list[dict]) -> None:
    """The adoption marker; ``not_adopted`` keeps the files a partial adoption left out, in the
    shared tier beside the lost journal's log (``datahub cache adopt-journal --json`` prints it)."""
    body = {
        "by": by, "host": socket.gethostname(), "at": time.time(), "done": done,
        "not_adopted": not_adopted,
    }  # fmt: skip
    lost.store.put(key, encode(body))


def adopted_by(chunks: ChunkStore) -> dict | None:
    """The adoption marker of this journal (``chunks``'s own), if another journal adopted it."""
    return read_object(chunks.store, f"{log_prefix(chunks)}/{ADOPTED}")
