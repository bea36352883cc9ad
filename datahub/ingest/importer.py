"""Import orchestration: list the source, merge against the head, spool the changes, commit once.

All-or-nothing: the change set is computed completely (every manifest line parsed, every
key validated, every ``--copy`` blob written) and spooled to a temporary file *before*
the single catalog commit, so any error or an interrupt leaves no new version. ``--copy``
copies run on a small thread pool in a bounded window and reach the spool in key order.
The commit
names the head it was planned against as its base, so a concurrent commit makes it fail
with StaleBase (saying to run the import again) instead of silently overwriting; a dataset
created meanwhile by another import is committed into on base 0, which decides the race. Blobs copied by an import that then failed
stay behind harmlessly (content-addressed) and are reused by the retry.
"""

from __future__ import annotations

import errno
import json
import tempfile
import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any, Protocol

from datahub.catalog.catalog import validated_changes
from datahub.catalog.model import Change, Delete, Put, Record, Version
from datahub.config import Config
from datahub.errors import AlreadyExists, Cancelled, DatasetNotFound, NoSpace, StaleBase
from datahub.ingest.blobs import BlobCopier
from datahub.ingest.items import SourceItem
from datahub.ingest.merge import PlannedChange, new_record, plan_changes
from datahub.ingest.sources import source_items
from datahub.storage import StoreRegistry, open_store
from datahub.validation import Unreadable, check_name

# Copies in flight. Each holds at most one read chunk plus its spool's RAM part
# (blobs.CHUNK_BYTES each), so RAM for copying stays under 2 * 8 * 4 MiB = 64 MiB.
COPY_CONCURRENCY = 8


class ProgressSink(Protocol):
    def update(self, n: int = 1, nbytes: int = 0) -> None: ...


@dataclass(frozen=True, slots=True)
class ImportReport:
    dataset: str
    source: str
    base: int  # head the import was planned against (0 = the dataset had no version)
    version: Version | None  # None: nothing changed, no version was created
    scanned: int
    added: int
    removed: int
    modified: int
    copied_bytes: int

    @property
    def changed(self) -> int:
        return self.added + self.removed + self.modified


def import_source(
    catalog,  # datahub.catalog.Catalog
    config: Config,
    stores: StoreRegistry,
    src: str,
    dataset: str,
    *,
    copy: bool = False,
    message: str = "",
    author: str = "",
    progress: ProgressSink | None = None,
    cancel: threading.Event | None = None,
    sort_budget_bytes: int = 32 * 1024**2,
    copy_concurrency: int = COPY_CONCURRENCY,
) -> ImportReport:
    """Import ``src`` into ``dataset`` (created if missing); commit a version only if something changed."""
    check_name(dataset)
    try:
        catalog.get_dataset(dataset)
        exists = True
    except DatasetNotFound:
        exists = False
    base = catalog.store.head(dataset) if exists else 0
    head: Iterator[Record] = iter(catalog.list_records(dataset, base)) if base else iter(())
    counts = {"added": 0, "removed": 0, "modified": 0}
    scanned = 0
    objects = open_store(config.resolved_objects_url, config) if copy else None
    copier = BlobCopier(objects, stores) if objects is not None else None

    def watched(items: Iterator[SourceItem]) -> Iterator[SourceItem]:
        nonlocal scanned
        for item in items:
            if cancel is not None and cancel.is_set():
                raise Cancelled(f"import of {src} into {dataset!r} cancelled; nothing was committed")
            scanned += 1
            if progress is not None:
                progress.update(1, item.size)
            yield item

    pending: deque[Future[Change]] = deque()
    pool = ThreadPoolExecutor(max_workers=copy_concurrency, thread_name_prefix="import-copy")
    try:
        with tempfile.TemporaryFile("w+", encoding="utf-8", prefix="datahub-import-changes-") as spool:
            items = watched(source_items(src, config, stores, sort_budget_bytes=sort_budget_bytes))
            with _temporary_space(src, dataset):  # the spool here, a manifest's sorted runs
                for planned in plan_changes(items, head, copy=copy):
                    counts[planned.kind] += 1
                    pending.append(_materialise(planned, copier, pool))
                    while len(pending) > copy_concurrency:  # a bounded window, written in key order
                        _write(spool, pending.popleft().result())
                while pending:
                    _write(spool, pending.popleft().result())
                spool.flush()
            version = None
            if any(counts.values()):
                if not exists:
                    # every change passes the commit's checks before the dataset is made, so
                    # a refused import creates nothing (issue 24 item 2)
                    spool.seek(0)
                    for _ in validated_changes(dataset, _read(spool)):
                        pass
                    try:
                        catalog.create_dataset(dataset, source=src)  # no owner: that grants API admin
                    except AlreadyExists:
                        if not _visible(catalog, dataset):
                            raise
                spool.seek(0)
                try:
                    version = catalog.commit(
                        dataset,
                        _read(spool),
                        base=base,
                        message=message or f"import {src}",
                        author=author,
                        lineage={"import": {"source": src, "copy": copy}},
                    )
                except StaleBase as exc:
                    raise _raced(exc, src, dataset, base) from None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # after an error: queued copies are dropped
        if objects is not None:
            objects.close()
    return ImportReport(
        dataset=dataset,
        source=src,
        base=base,
        version=version,
        scanned=scanned,
        copied_bytes=copier.copied_bytes if copier is not None else 0,
        **counts,
    )


@contextmanager
def _temporary_space(src: str, dataset: str) -> Iterator[None]:
    """NoSpace naming the temporary directory when it fills up while the change set is spooled
    (or a manifest sorted) there, instead of a bare ``OSError``: nothing was committed."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        where = tempfile.gettempdir()
        raise NoSpace(
            f"import of {src} into dataset {dataset!r}: the temporary directory {where} filled up "
            f"while the change set was written there ({exc.strerror}); nothing was committed: free "
            "space there, or point TMPDIR at a larger file system, and run the import again",
            dataset=dataset,
            tmpdir=where,
        ) from exc


def _visible(catalog, dataset: str) -> bool:
    """Whether this caller sees ``dataset`` now: after a create found its name taken, one made
    meanwhile (another import of the same name, an API caller) is committed into on base 0,
    which decides the race, as for a dataset there from the start (it said "already exists;
    pick another name" of the name the import was asked for). One a remote catalog hides from
    this token keeps the server's AlreadyExists, which names the role the token lacks."""
    try:
        catalog.get_dataset(dataset)
    except DatasetNotFound:
        return False
    return True


def _raced(exc: StaleBase, src: str, dataset: str, base: int) -> StaleBase:
    """The error of an import that another commit beat to ``dataset``'s next version: what an
    import's user does next is run it again (it then commits only what differs from the new
    head), not "rebase your changes", which an import has no way to do."""
    head = exc.details.get("head")
    made = f"version {head}" if head is not None else "a new version"
    planned = f"version {base}" if base else "no version (a new dataset)"
    return StaleBase(
        f"import of {src} into dataset {dataset!r} was planned against {planned}, but another "
        f"commit made {made} meanwhile; nothing of this import was committed: run the import again "
        "(it commits only what differs from the new head)",
        dataset=dataset,
        base=base,
        **({"head": head} if head is not None else {}),
    )


def _materialise(
    planned: PlannedChange, copier: BlobCopier | None, pool: ThreadPoolExecutor
) -> Future[Change]:
    """The Change for a planned one; ``--copy`` puts are copied on the pool, the rest resolve at once."""
    if planned.item is None:
        return _done(Delete(planned.key))
    item, old = planned.item, planned.old
    if copier is None:
        return _done(Put(new_record(item, old, None)))
    return pool.submit(lambda: Put(new_record(item, old, copier.copy)))


def _done(change: Change) -> Future[Change]:
    future: Future[Change] = Future()
    future.set_result(change)
    return future


def _write(spool: IO[str], change: Change) -> None:
    if isinstance(change, Delete):
        spool.write(json.dumps({"delete": change.key}) + "\n")
        return
    r = change.record
    row = [r.key, r.url, r.etag, r.size, r.checksum, *(_spooled(v) for v in (r.meta, r.labels))]
    # an over-deep legacy field goes as its stored text, named in "raw", to be stored as it was
    raw = [i for i, v in ((5, r.meta), (6, r.labels)) if isinstance(v, Unreadable)]
    spool.write(json.dumps({"put": row, **({"raw": raw} if raw else {})}, separators=(",", ":")) + "\n")


def _spooled(value: Any) -> Any:
    return value.stored_text() if isinstance(value, Unreadable) else dict(value)


def _read(spool: IO[str]) -> Iterator[Change]:
    for line in spool:
        row = json.loads(line)
        if "delete" in row:
            yield Delete(row["delete"])
        else:
            fields = row["put"]
            for i in row.get("raw", ()):
                fields[i] = Unreadable(fields[i])
            key, url, etag, size, checksum, meta, labels = fields
            yield Put(Record(key, url, etag, size, checksum, meta, labels))
