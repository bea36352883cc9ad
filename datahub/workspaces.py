"""Commit a flushed workspace as a dataset version (training outputs are data too).

Lives outside ``datahub.cache`` because the cache knows nothing of the catalog: this module
is the one place the two meet.

Records never point at the workspace's own objects (``<objects_url>/workspaces/<name>/j-<journal id>/<path>``):
the flusher mirrors the workspace there, so the next flush overwrites a changed file and
deletes a removed one, and a version that pointed at them would lose its bytes (found by
the chaos soak, seed 26; ``tests/writeback/test_commit_history.py``). A commit first pins
each new or changed file as a content-addressed blob (``<objects_url>/blobs/sha256/…``,
the layout of ``--copy`` imports: a name never gets other bytes), read back from the
workspace object under the etag the flush recorded; the records point at the blobs, so the
version is immutable like any other (promise 1). A blob already there (the same bytes
committed before, by any workspace or import) is not read or written again. Each content is
pinned once per batch of keys (a later batch finds its blob stored: one stat) and written
with ``put_once``, which never replaces a stored blob: files of one content pinned side by
side each put it, and on a local store every put but the
last left its records naming an etag the blob no longer had (review16, pinblobs16).
Only the differences from the dataset's head are committed, and the commit id is derived
from the base and the content, so retrying after a lost reply does not commit twice.

A commit applies the workspace's own changes to the head, never its whole tree (merge17): the
dataset may hold files the workspace never saw (an import, another workspace, this
workspace's files committed from another node, whose journal was local to that node). A file
of the workspace is put where it differs from the head, unless the workspace has not changed
it since its last commit put it (then the head's change since is someone's, and stands:
review17c); a head file the workspace lacks is
deleted only if this journal committed it (``_Base``: the records its commits to that dataset
put, kept in the journal) and the head still holds that very record. Before, every head key
the workspace lacked was deleted: a rescheduled CSI pod's commit emptied the head of what the
first node committed, and a first commit into an imported dataset replaced it whole.

A commit streams (commitmem18, issue 38): the workspace's files, the head's records and the
base are walked side by side in key order, a batch of keys at a time (``_plan``,
``datahub.commit_base``), so its memory does not grow with the workspace's files.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import tempfile
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from datahub.catalog.model import EMPTY, Change, Delete, Put, Record, Version
from datahub.commit_base import BASE_META, UNSETTLED, Spill, Writes, batches, joined
from datahub.commit_base import Base as _Base
from datahub.commit_base import digest as _ident_digest
from datahub.config import Config
from datahub.errors import (
    Conflict,
    DatasetNotFound,
    NotFound,
    ObjectChanged,
    ObjectNotFound,
    VersionNotFound,
)
from datahub.ingest.blobs import CHUNK_BYTES, blob_key
from datahub.storage.base import ObjectInfo, ObjectStore
from datahub.storage.blobs import BlobWriter, Content, store_blob
from datahub.writeback import FlushedObject, Workspace, open_workspace

log = logging.getLogger(__name__)
PIN_THREADS = 8  # files pinned as blobs at once (each reads back and puts one object)
__all__ = ["BASE_META", "UNSETTLED", "commit_workspace", "finish_workspace", "leased", "outputs_description"]


def outputs_description(workspace: str) -> str:
    """The description of a dataset made to hold a workspace's commits."""
    return f"outputs of workspace {workspace!r}"


def commit_workspace(
    workspace: Workspace, catalog, dataset: str, *, message: str = "", author: str = ""
) -> Version | None:
    """Flush ``workspace`` and commit its changes onto the head of ``dataset`` as the next version.

    Its changes, not its whole tree: files it has are put where the head differs (but for
    one unchanged since this journal committed it: ``_change``), and a head file it lacks is
    deleted only if this journal committed that very record (``_Base``);
    files others committed stay. The dataset is created if it does not exist. Raises Conflict if files keep changing
    while we flush (commit once writers pause); returns the head unchanged if the
    workspace already equals it (or differs only by others' changes since), and None if the workspace is empty and the dataset has no
    version yet (an empty change set makes no version; before, it failed the unmount, and a
    CSI workspace whose pod wrote nothing could not be unpublished).
    """
    with _flushed(workspace) as flushed, Writes() as writes, contextlib.ExitStack() as spills:
        changes = Spill()
        spills.callback(lambda: changes.close())  # the second pass's, if it replaced the first
        try:
            catalog.get_dataset(dataset)
        except DatasetNotFound:
            catalog.create_dataset(dataset, description=outputs_description(workspace.name))
        try:
            head: Version | None = catalog.resolve(dataset, None)
        except VersionNotFound:
            head = None
        base = head.seq if head else 0
        committed = _Base(workspace, dataset)
        current = catalog.list_records(dataset, base) if head else iter(())
        digest = hashlib.sha256(f"{workspace.name}\0{dataset}\0{base}".encode())
        earlier = _plan(workspace, flushed, current, committed, changes, writes, digest)
        if earlier:  # a content's stale records in a batch before its good ones: a second pass
            repaired = _repair_earlier(
                workspace,
                flushed,
                catalog.list_records(dataset, base) if head else iter(()),
                committed,
                changes,
                writes,
                digest,
                earlier,
            )
            changes.close()
            changes = repaired
        if not changes.count:
            # nothing to commit: the head as it is (None: an empty workspace, no version yet)
            committed.settle(writes.settled.rows())
            return head
        committed.expect(writes.expected.rows())
        version = catalog.commit(
            dataset,
            (Put(record) if record is not None else Delete(key) for key, record in changes.rows()),
            base=base,
            message=message or f"commit of workspace {workspace.name!r}",
            author=author,
            lineage={"workspace": workspace.name, "files": flushed.count},
            commit_id=f"workspace-{digest.hexdigest()[:32]}",
        )
        committed.settle(writes.settled.rows())
        return version


def _plan(
    workspace: Workspace,
    flushed: Spill,
    current: Iterator[Record],
    committed: _Base,
    changes: Spill,
    writes: Writes,
    digest: Any,
) -> dict[str, str]:
    """Walk the workspace's files, the head's records and the base side by side in key order,
    a batch of keys at a time: pin the batch's files as blobs, spill each change as ``(key,
    the record to put, or None to delete)``, and note what the base's stores will write.
    ``digest`` takes every file's path and etag, and every change (which head files go, and
    which are put, depend on the journal's records too): the commit id. Returns the digests
    whose records in a batch already spilled named an etag their blob lost, with the blob's
    (``_Etags.earlier``; empty unless such damage was found): for ``_repair_earlier``."""
    blobs = workspace.blobs
    etags = _Etags()
    origin, origin_key = workspace.flusher.origin, workspace.flusher.origin_key
    walk = joined(((r.key, r) for r in current), ((row[0], row) for row in flushed.rows()), committed.scan())
    for batch in batches(walk):
        objects = [
            FlushedObject(key, origin.url_for(origin_key(key)), *f[1:]) for key, (_, f, _) in batch if f
        ]
        pinned = {key: h for key, (h, f, _) in batch if f and h is not None and _head_blob(h, blobs)}
        wanted = _pin_blobs(workspace, objects, pinned, etags)
        for key, (h, f, idents) in batch:
            new = wanted[key] if f else None
            change = _change(h, new, idents)
            if f:
                digest.update(f"\0{key}\0{f[1]}".encode())
            if isinstance(change, Delete):
                digest.update(f"\0-{key}".encode())
                changes.add((key, None))
            elif change is not None:
                digest.update(f"\0+{key}".encode())
                changes.add((key, new))
            writes.note(key, _ident(new) if new is not None else None, idents)
    return etags.earlier


ETAGS_MAX = 65_536  # digests whose records' etag a commit remembers across batches (LRU, ~13 MB)


class _Etags:
    """What a commit learned of each content's etag, kept across its batches of keys.

    Why: ``_repair_lost_etags`` sees one batch at a time (commitmem18), and the sign of a
    record naming an etag its blob lost is two etags for one digest. Files of one content in a
    row (a directory of identical files) may put every stale record in one batch and the good
    ones in others: each batch alone saw one etag, and nothing was repaired (review19a).
    ``named``: the etag the latest batch's records of a digest named (after its repairs);
    ``proven``: the blob's etag, stat'ed and its bytes hashed to the digest (None: the blob
    does not hold them; left alone), so a content is read once per commit; ``earlier``: the
    digests whose records in an already spilled batch named another etag than the blob's,
    with the blob's. Each holds at most ``ETAGS_MAX`` digests, the least recently seen out
    first: memory stays bounded, and a content forgotten is compared within its batches only
    from then on (damage from before pinblobs16 spread that far apart is rare and old)."""

    def __init__(self, limit: int = ETAGS_MAX) -> None:
        self.limit = limit
        self.named: OrderedDict[str, str] = OrderedDict()
        self.proven: OrderedDict[str, str | None] = OrderedDict()
        self.earlier: dict[str, str] = {}

    def name(self, digest: str, etag: str) -> None:
        _bounded_put(self.named, digest, etag, self.limit)

    def prove(self, digest: str, etag: str | None) -> None:
        _bounded_put(self.proven, digest, etag, self.limit)

    def spilled_stale(self, digest: str, etag: str) -> None:
        if digest not in self.earlier and len(self.earlier) >= self.limit:
            log.warning(
                "more than %d contents had stale etags in this commit; the records of blob %s "
                "that came before its good ones are left as they are: commit again to repair more",
                self.limit,
                blob_key(digest),
            )
            return
        self.earlier[digest] = etag


def _bounded_put(table: OrderedDict, key: str, value: Any, limit: int) -> None:
    table[key] = value
    table.move_to_end(key)
    while len(table) > limit:
        table.popitem(last=False)


def _repair_earlier(
    workspace: Workspace,
    flushed: Spill,
    current: Iterator[Record],
    committed: _Base,
    changes: Spill,
    writes: Writes,
    digest: Any,
    earlier: dict[str, str],
) -> Spill:
    """The changes again, with a record put for each workspace file of a digest in
    ``earlier`` whose record (the change's, or the head's it kept) names another etag than
    its blob's proven one: ``_plan``'s first pass met those records before it knew.

    A second walk of the head, the workspace's files, the base and the changes, in key
    order like the first, so the spill stays in the order ``catalog.commit`` takes; it runs
    only when such damage was found, so a commit without it costs nothing more."""
    blobs = workspace.blobs
    assert blobs is not None  # _pin_blobs refused a workspace without one
    out = Spill()
    try:
        walk = joined(
            ((r.key, r) for r in current),
            ((row[0], row) for row in flushed.rows()),
            committed.scan(),
            ((row[0], row) for row in changes.rows()),
        )
        for key, (h, f, idents, c) in walk:
            chosen = c[1] if c is not None else (h if f else None)
            etag = earlier.get(f[3]) if f and chosen is not None else None
            if (
                etag is not None
                and chosen.etag != etag
                and (chosen.url, chosen.checksum) == (blobs.url_for(blob_key(f[3])), f"sha256:{f[3]}")
            ):
                fixed = dataclasses.replace(chosen, etag=etag, meta=EMPTY, labels=EMPTY)
                digest.update(f"\0~{key}".encode())
                out.add((key, fixed))
                _renote(
                    writes, key, _ident(dataclasses.replace(fixed, etag=chosen.etag)), _ident(fixed), idents
                )
            elif c is not None:
                out.add(c)
    except BaseException:
        out.close()
        raise
    return out


def _renote(writes: Writes, key: str, first: str, ident: str, idents: list[str] | None) -> None:
    """``Writes.note`` of a key the first pass noted as ``first``, now put as ``ident``:
    written whatever the first pass wrote (the later entry of a key wins), its union keeping
    ``first`` too (a crash before the commit lands leaves the head with either)."""
    union = list(idents) if idents is not None else [UNSETTLED]
    for i in (first, ident):
        if i not in union:
            union.append(i)
    writes.expected.add((key, union))
    writes.settled.add((key, [ident]))


def finish_workspace(
    name: str, config: Config, commit_to: str | None = None, *, author: str = ""
) -> Version | None:
    """Push an unheld workspace's acknowledged files to the object store, and commit them if asked.

    For a supervisor (the CSI node plugin) after the workspace's mount daemon is gone: if
    the daemon's own flush failed (the object store was down), the files are safe in the
    journal and shared tier, but nothing else would ever push them out. Opening the
    workspace replays its journal (under the writer lease, like every open with a catalog);
    raises if the flush or commit fails, so the caller retries. ``author``: the version's (the
    CSI plugin gives the one it gave the daemon's ``--author``).
    """
    from datahub.catalog import open_catalog
    from datahub.storage import StoreRegistry

    url = config.resolved_catalog_url
    catalog = open_catalog(url, retry=config.catalog) if commit_to or leased(url) else None
    try:
        with StoreRegistry(config) as stores:
            lease = catalog.store if catalog is not None and leased(url) else None
            workspace = open_workspace(
                name, config, stores, background=False, lease=lease, commit_to=commit_to or ""
            )
            try:
                dirty = workspace.dirty_count()  # counted a batch at a time, no list (recover19)
                if dirty:
                    log.warning(
                        "workspace %s still had %d dirty file(s) after unmount: flushing", name, dirty
                    )
                    workspace.flush()
                if not commit_to or catalog is None:
                    return None
                version = commit_workspace(
                    workspace, catalog, commit_to, message=f"workspace {name}", author=author
                )
                log.info("workspace %s is %s", name, _committed_as(commit_to, version))
                return version
            finally:
                workspace.close()
    finally:
        if catalog is not None:
            catalog.close()


def leased(catalog_url: str) -> bool:
    """Whether workspaces opened with this catalog take their writer lease there: always, but
    for an SQLite catalog that does not exist (embedded use on one machine, where nothing else
    shares the workspace and the journal's flock is the one-writer rule; docs/writeback.md)."""
    return not catalog_url.startswith("sqlite:///") or Path(catalog_url[len("sqlite:///") :]).exists()


def _committed_as(dataset: str, version: Version | None) -> str:
    return f"{dataset}@v{version.seq}" if version is not None else f"empty: nothing committed to {dataset}"


def _head_blob(record: Record, blobs: ObjectStore | None) -> bool:
    """Whether a head record already points at the blob its checksum names: a file unchanged
    since (the same checksum and size at the same key) keeps it without a read or a write.

    Only a record whose URL is the very blob its checksum names counts: a writer could
    commit a record pointing at a blob of its own bytes under another file's checksum (every
    reader sees checksums), and a later workspace commit then pointed the victim's unchanged
    file at the writer's bytes (review13). And only the record at the file's own key
    (``_plan`` asks for that one alone): one at another key could name the right blob with a
    made-up etag (the API checks no etag), and was reused for every file of that blob, whose
    reads then all failed (review13b). A file whose blob only another key names costs one
    stat of the blob instead."""
    if blobs is None:
        return False
    r = record
    digest = r.checksum[len("sha256:") :] if r.checksum and r.checksum.startswith("sha256:") else ""
    return len(digest) == 64 and r.url == blobs.url_for(blob_key(digest))


def _pin_blobs(
    workspace: Workspace, objects: list[FlushedObject], pinned: dict[str, Record], etags: _Etags | None = None
) -> dict[str, Record]:
    """Each flushed file as a record pointing at its content-addressed blob."""
    blobs = workspace.blobs
    if blobs is None:
        raise Conflict(
            f"workspace {workspace.name!r} has no object store to keep committed files in; "
            "open it with datahub.writeback.open_workspace",
            workspace=workspace.name,
        )
    records: dict[str, Record] = {}
    sources: dict[str, FlushedObject] = {}  # digest -> the first file of it to pin
    held: dict[str, FlushedObject] = {}  # digest -> a file of it (the head may have lost its blob)
    for o in objects:
        held.setdefault(o.sha256, o)
        known = pinned.get(o.path)
        if known is not None and (known.checksum, known.size) == (f"sha256:{o.sha256}", o.size):
            # its bytes, not its metadata or labels: a workspace puts none, and the journal
            # records this as the workspace's (``_Base``); a label someone added makes the
            # head's record theirs, which a later delete of the file must keep (review17c)
            records[o.path] = dataclasses.replace(known, meta=EMPTY, labels=EMPTY)
        else:
            sources.setdefault(o.sha256, o)

    md5_etags = workspace.flusher.origin.etag_hasher(0) is not None

    def pin(o: FlushedObject) -> ObjectInfo:
        # the flush's etag of these very bytes, where it is their md5 (S3): a stored blob of
        # that etag holds them, proven by its stat; any other is read and hashed once (review17a)
        content = Content(o.sha256, o.size, (lambda: (o.etag,)) if md5_etags else lambda: ())

        def write(writer: BlobWriter, replace: bool) -> ObjectInfo:  # writer: the two puts it makes
            return _copy_flushed(workspace, o, writer, blob_key(o.sha256), replace=replace)  # type: ignore[arg-type]

        return store_blob(blobs, content, write).info

    # each digest once (files of one content, such as empty __init__.py files, share a blob):
    # pinned by each file at once, all but the last put's records named an etag it lost
    with ThreadPoolExecutor(PIN_THREADS, thread_name_prefix=f"pin-{workspace.name}") as pool:
        infos = dict(zip(sources, pool.map(pin, sources.values()), strict=True))
    for o in objects:
        if o.path not in records:
            url = blobs.url_for(blob_key(o.sha256))
            records[o.path] = Record(o.path, url, infos[o.sha256].etag, o.size, checksum=f"sha256:{o.sha256}")
    _repair_lost_etags(blobs, records, lambda digest: _repin(workspace, held[digest], pin), etags)
    return records


def _repin(workspace: Workspace, o: FlushedObject, pin) -> ObjectInfo | None:
    """Pin ``o``'s content again for records whose blob is gone: from the workspace's own
    object, checked against its sha256 like any pin. None if that object no longer holds
    the flushed bytes either (a flush since): the records stay as they are, and a warning
    says which and what to do, so the commit still lands (blobs17: before, the missing blob
    raised ObjectNotFound and every commit of the workspace failed until someone stepped in)."""
    try:
        return pin(o)
    except (ObjectNotFound, ObjectChanged) as exc:
        log.warning(
            "workspace %s: the blob of %s (sha256 %s) is gone and the workspace object no longer "
            "holds its bytes (%s); its records are committed as they were and stay unreadable: "
            "restore the blob, or write the file again and commit",
            workspace.name,
            o.path,
            o.sha256,
            exc,
        )
        return None


def _repair_lost_etags(
    blobs: ObjectStore,
    records: dict[str, Record],
    repin: Callable[[str], ObjectInfo | None],
    etags: _Etags | None = None,
) -> None:
    """Give the blob's etag back to records of one content that disagree on it.

    Why: before each content was pinned once (pinblobs16), files of one content each put its
    blob, and every record but the last put's took an etag the blob lost: unreadable for
    good, and an unchanged file keeps its head record (``_head_blob``), so every later
    version carried the damage. Such records are exactly those of one digest naming two or
    more etags, so a commit without that sign costs nothing here; with it, one stat, and the
    blob is read once and its sha256 checked before any record takes its etag (a blob that
    does not hold its digest's bytes is left alone: the records stay as they are). A blob
    that is gone is pinned again by ``repin(digest)`` (from the workspace's file of that
    content; None: left as they are), and every record of it takes the new blob's etag.
    ``etags``: what the commit's earlier batches named and proved (``_Etags``), so records of
    one content in different batches are compared too (review19a)."""
    etags = etags if etags is not None else _Etags()
    named: dict[str, set[str]] = {}
    for r in records.values():
        named.setdefault(r.checksum or "", set()).add(r.etag)
    for checksum, seen in named.items():
        if not checksum.startswith("sha256:"):
            continue
        digest = checksum[len("sha256:") :]
        before = etags.named.get(digest)
        if len(seen | {before} - {None}) < 2:
            etags.name(digest, next(iter(seen)))
            continue
        if digest in etags.proven:
            good = etags.proven[digest]
        else:
            good = _blob_etag(blobs, digest, repin)
            etags.prove(digest, good)
        if good is None:  # left as they are
            etags.name(digest, before or next(iter(seen)))
            continue
        for p, r in records.items():
            if r.checksum == checksum and r.etag != good:
                records[p] = dataclasses.replace(r, etag=good)
        if before is not None and before != good:
            etags.spilled_stale(digest, good)
        etags.name(digest, good)


def _blob_etag(blobs: ObjectStore, digest: str, repin: Callable[[str], ObjectInfo | None]) -> str | None:
    """The etag of ``digest``'s blob once its bytes hash to the digest (None: they do not,
    or it was gone and could not be pinned again)."""
    key = blob_key(digest)
    try:
        info = blobs.stat(key)
    except ObjectNotFound:
        repinned = repin(digest)  # written from bytes checked against the digest just now
        return repinned.etag if repinned is not None else None
    check = hashlib.sha256()
    for piece in blobs.read_chunks(key, etag=info.etag):
        check.update(piece)
    if check.hexdigest() != digest:
        log.warning("blob %s does not hold the bytes of its digest; records left as they are", key)
        return None
    return info.etag


def _copy_flushed(
    workspace: Workspace, o: FlushedObject, blobs: ObjectStore, target: str, *, replace: bool = False
) -> ObjectInfo:
    """Put the blob of a flushed file: read back from its workspace object, or from the
    workspace itself if that object no longer holds what this journal flushed.

    Why the second source: a journal made before nodeloss18 names its objects by workspace,
    not by journal, so the same workspace on another node (a CSI pod rescheduled while this
    node was down) overwrites or deletes them, and this journal still takes its own flush for
    current: no later flush puts the file again, and every commit of it failed for good
    (review17c). A journal made since flushes under its own folder (``j-<journal id>``), which
    no other journal writes.
    The file's bytes are still in the workspace (journal and shared tier) and must hash to
    what the flush recorded, or the commit fails and is retried on a fresh flush."""
    origin = workspace.flusher.origin
    key = workspace.flusher.origin_key(o.path)
    try:
        return _copy(lambda start, end: origin.read(key, start, end, etag=o.etag), o, blobs, target, replace)
    except (ObjectChanged, ObjectNotFound):
        log.warning(
            "workspace object %s is no longer what workspace %s flushed: its blob is read from the workspace",
            o.url,
            workspace.name,
        )
    try:
        handle = workspace.open(o.path)
    except NotFound as exc:  # removed since the flush: the next commit's flush deletes it
        raise ObjectChanged(
            f"workspace file {o.path!r} is gone since its flush; commit again", url=o.url, etag=o.etag
        ) from exc
    try:
        return _copy(lambda start, end: handle.read(start, end - start), o, blobs, target, replace)
    finally:
        # a reader's close commits nothing: closed with ``with``, it committed what a writer had
        # half written and not acknowledged, and the next version held it (bytes31)
        handle.close(commit=False)


def _copy(
    read: Callable[[int, int], bytes], o: FlushedObject, blobs: ObjectStore, target: str, replace: bool
) -> ObjectInfo:
    """Read the file's bytes (``read(start, end)``; ObjectChanged if they changed: the
    commit is then retried on fresh state), check their sha256, put the blob: once
    (``put_once``), or over a stored object that is not this content (``replace``)."""
    digest = hashlib.sha256()
    with tempfile.SpooledTemporaryFile(max_size=CHUNK_BYTES) as spool:
        offset = 0
        while offset < o.size:
            data = read(offset, min(offset + CHUNK_BYTES, o.size))
            if not data:
                break
            digest.update(data)
            spool.write(data)
            offset += len(data)
        if offset != o.size or digest.hexdigest() != o.sha256:
            raise ObjectChanged(
                f"workspace file {o.path!r} ({o.url}) no longer holds the bytes its flush recorded "
                f"(sha256 {o.sha256}); commit again",
                url=o.url,
                etag=o.etag,
            )
        spool.seek(0)
        return (blobs.put if replace else blobs.put_once)(target, spool, o.size)


def _flushed(workspace: Workspace) -> Spill:
    """The workspace's flushed files, ``(path, etag, size, sha256)`` in path order, spilled."""
    for _attempt in range(2):
        workspace.flush()
        if not workspace.dirty(limit=1):  # stops at the first dirty file (recover19)
            spill = Spill()
            try:  # a close or fsync between dirty() and this read makes it refuse: flush again
                _spill_flushed(workspace, spill)
                return spill
            except Conflict:
                spill.close()
                continue
            except BaseException:
                spill.close()
                raise
    raise Conflict(
        f"workspace {workspace.name!r} kept changing while it was flushed for a commit; "
        "commit again once writers pause",
        workspace=workspace.name,
    )


def _spill_flushed(workspace: Workspace, spill: Spill) -> None:
    """Every acknowledged file with what its origin object holds, read in one journal
    transaction; Conflict if one is not flushed at its current generation: the same answer
    as ``Workspace.flushed_objects``, but in path order and to disk, never as a list.

    Why all or nothing: the commit takes these as the whole workspace, and deletes from the
    version each file it lacks that this journal committed before (merge17); an fsync landing
    between the caller's flush and this read once made a version without that acknowledged
    file (review14wb). Why walk ``origin`` (keyed by path) and not the namespace (keyed by
    directory, then name): its order is the catalog's, so the head streams beside it. A file
    of the namespace the origin holds nothing for is found by counting: the namespace is
    walked again only if the counts differ."""
    name = workspace.name
    with workspace.journal.read() as txn:
        seen = 0  # namespace files the origin has an entry for
        for path, state in txn.origins():
            entry = txn.entry(path)
            if entry is None or entry["t"] != "f":
                continue  # a pending delete
            seen += 1
            rec = txn.file(entry["id"])
            if rec is None or rec.get("unacked"):
                continue
            if state["id"] != entry["id"] or state["gen"] != rec["gen"]:
                raise _changed_since_flush(name, path)
            spill.add((path, state["etag"], state["size"], state["sha256"]))
        if sum(1 for _ in txn.tree_files()) == seen:
            return
        for path, file_id in txn.tree_files():
            rec = txn.file(file_id)
            if txn.origin(path) is None and rec is not None and not rec.get("unacked"):
                raise _changed_since_flush(name, path)


def _changed_since_flush(workspace: str, path: str) -> Conflict:
    return Conflict(
        f"{path!r} in workspace {workspace!r} changed after it was flushed; "
        "flush again (commit once writers pause)",
        workspace=workspace,
        path=path,
    )


def _change(head: Record | None, new: Record | None, idents: list[str] | None) -> Change | None:
    """A Put of the workspace's file where the head lacks it or holds it otherwise, but for one
    the workspace has not changed since its last commit put it; a Delete of a head file the
    workspace lacks that it committed itself and nobody changed since (``idents``: the
    base's identities of the key). Any other head file is someone else's: kept.

    Why a file unchanged since the workspace committed it is not put again: the head's change
    or delete of it since (a user's ``datahub commit``, another node's workspace) is the only
    change there is, and putting it back undid it at every commit (review17c). Unchanged means
    the journal's one record for the key is this file's: after a commit whose outcome the
    journal never learned (``expect``'s union, two or more records), the file is put."""
    if new is None:
        return Delete(head.key) if head is not None and idents and _ident(head) in idents else None
    if head is None:
        return None if _unchanged(new, idents) else Put(new)
    if (head.url, head.etag, head.size) != (new.url, new.etag, new.size) and _ours(head, new, idents):
        return Put(new)
    return None


def _ours(head: Record, new: Record, idents: list[str] | None) -> bool:
    """Whether the workspace's file wins over the head's other record at its key: if the
    workspace changed the file since its last commit, or the head names the same bytes under
    another etag (a record no read can use, as the pin before pinblobs16 left them: the
    workspace's repairs it). Else the head's other bytes are someone's change since: kept."""
    return not _unchanged(new, idents) or (head.url, head.checksum) == (new.url, new.checksum)


def _unchanged(record: Record, idents: list[str] | None) -> bool:
    """Whether the workspace's file is the record its last settled commit put at that key."""
    return idents is not None and len(idents) == 1 and idents[0] == _ident(record)  # no digest for a new key


def _ident(record: Record) -> str:
    """What makes a head record the one a workspace commit put: its bytes' location, etag,
    size and checksum, and no metadata or labels (a commit of a workspace puts none: a record
    someone labeled since is someone else's now); as a digest (``commit_base.digest``)."""
    return _ident_digest(
        [record.url, record.etag, record.size, record.checksum, bool(record.meta or record.labels)]
    )
