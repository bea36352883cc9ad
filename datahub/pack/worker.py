"""One pack worker: claim a task, pack its key range into a shard, upload it, repeat.

The same loop runs inside ``datahub pack --workers N`` (one per local process) and as
``datahub pack-worker --job ID`` on any machine that reaches the catalog and the object
store. A heartbeat thread renews the task's lease while the shard is built; if the lease
is lost anyway (the worker stalled past expiry and another took the task) this attempt's
shard is discarded. Shards are uploaded under a content-addressed name below the job's
prefix, so a retry or a late duplicate never overwrites bytes a version already points at.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import re
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from datahub.catalog import Catalog, Record, open_catalog
from datahub.config import Config
from datahub.errors import (
    BadImage,
    DatahubError,
    InvalidInput,
    LeaseLost,
    ObjectChanged,
    ObjectNotFound,
    StorageError,
    TransientStorageError,
)
from datahub.pack.image import transform_image
from datahub.pack.job import CODE_VERSION, job_state, objects_dir, shard_object_name
from datahub.pack.layout import KIND_IMAGE, KIND_RAW, Sample, encode_sample
from datahub.pack.shard import ShardWriter
from datahub.pack.spec import PackSpec, is_image_key
from datahub.storage import ObjectStore, StoreRegistry
from datahub.tasks import Task, TaskQueue, open_task_queue

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 3  # a task that crashed its worker this often is marked FAILED
# A task that fails transiently (the origin gave up after its retries, a scratch disk was
# full) is tried again in place, under the same lease, this many times in all, before its
# worker gives it back: each claim counts towards MAX_ATTEMPTS, so three passing outages
# used to fail a job for good although no record was bad (the chaos soak, seed 26).
TRANSIENT_TRIES = 5
TRANSIENT_BACKOFF = 2.0  # seconds before the first try again; doubles, at most 30
_TRANSIENT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EAGAIN})
_BAD_SOURCE = (BadImage, ObjectNotFound, ObjectChanged)  # per-record problems: skip or fail


@dataclass
class PackServices:
    """What a worker process needs, opened once from the Config and closed together."""

    config: Config
    catalog: Catalog
    stores: StoreRegistry
    cache: Any  # datahub.cache.TieredCache: read(ref) / hint(refs)
    objects: ObjectStore
    queue: TaskQueue
    scratch: Path
    _owned: list[Callable[[], None]] = field(default_factory=list)

    @classmethod
    def open(cls, config: Config) -> PackServices:
        from datahub.cache import open_cache

        stores = StoreRegistry(config)
        catalog = open_catalog(config.resolved_catalog_url, retry=config.catalog)
        cache = open_cache(config, stores)
        queue = open_task_queue(config.resolved_catalog_url)
        scratch = config.home_path / "pack" / "scratch"
        scratch.mkdir(parents=True, exist_ok=True)
        sweep_scratch(scratch)
        services = cls(
            config, catalog, stores, cache, stores.store(config.resolved_objects_url), queue, scratch
        )
        services._owned = [queue.close, cache.close, catalog.close, stores.close]
        return services

    def close(self) -> None:
        for close in self._owned:
            close()
        self._owned = []


@dataclass
class WorkerReport:
    worker: str
    done: list[int] = field(default_factory=list)  # task indexes this worker completed
    lost: list[int] = field(default_factory=list)  # tasks whose lease it lost (work discarded)
    failed: str = ""  # the error that failed the job, if this worker hit it


def worker_name(suffix: str = "") -> str:
    return f"{socket.gethostname()}:{os.getpid()}{':' + suffix if suffix else ''}"


def work(
    services: PackServices,
    job: str,
    *,
    worker: str | None = None,
    lease_seconds: float = 60.0,
    poll_seconds: float = 0.25,
    stop: threading.Event | None = None,
    on_sample: Callable[[int], None] | None = None,
) -> WorkerReport:
    """Pack tasks of ``job`` until none is left (or ``stop`` is set); safe to run anywhere, any number."""
    queue, stop = services.queue, stop or threading.Event()
    report = WorkerReport(worker or worker_name())
    while not stop.is_set():
        state = job_state(queue, job)
        if state.done or state.failed:
            break
        _same_code(job, state.meta)
        task = queue.claim(job, report.worker, lease_seconds)
        if task is None:  # the rest is leased by live workers: wait for DONE or for a lease to expire
            stop.wait(poll_seconds)
            continue
        if task.attempts > MAX_ATTEMPTS:
            queue.fail(job, task.index, task.lease, f"task {task.index} crashed {MAX_ATTEMPTS} workers")
            continue
        heartbeat = _Heartbeat(queue, task, lease_seconds)
        try:
            result = _pack_in_place(services, state.meta, task, heartbeat.lost, stop, on_sample)
        except LeaseLost:
            report.lost.append(task.index)
            continue
        except _BAD_SOURCE as exc:  # only raised under --on-corrupt fail
            heartbeat.stop()
            report.failed = exc.message
            queue.fail(job, task.index, task.lease, exc.message)
            break
        except BaseException:
            heartbeat.stop()
            queue.release(job, task.index, task.lease)  # hand it back at once, not at lease expiry
            raise
        finally:
            heartbeat.stop()
        try:
            queue.complete(job, task.index, task.lease, result)
            report.done.append(task.index)
        except LeaseLost:
            report.lost.append(task.index)
    return report


def _same_code(job: str, meta: Mapping[str, Any]) -> None:
    """InvalidInput unless this worker runs the code the job was started (or resumed) with.
    Why: a ``pack-worker`` of another release packed its tasks into other bytes than the rest
    of the job's, which the finalize must then refuse (``datahub.pack.job._resumed_code``):
    it is told before it packs anything."""
    started = meta.get("code_version")
    if started and started != CODE_VERSION:
        raise InvalidInput(
            f"pack job {job} was started by {started}, and this worker is {CODE_VERSION}: one "
            "version must not mix shards of two releases; run the worker of the job's release, or "
            "pack again with --restart from this one",
            job=job,
        )


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, TransientStorageError):
        return True
    return isinstance(exc, OSError) and exc.errno in _TRANSIENT_ERRNOS


def _pack_in_place(
    services: PackServices,
    meta: Mapping[str, Any],
    task: Task,
    lost: threading.Event,
    stop: threading.Event,
    on_sample: Callable[[int], None] | None,
) -> dict[str, Any]:
    """``pack_task``, tried again after a transient failure (see TRANSIENT_TRIES)."""
    delay = TRANSIENT_BACKOFF
    for tried in range(1, TRANSIENT_TRIES + 1):
        try:
            return pack_task(services, meta, task, lost=lost, on_sample=on_sample)
        except (TransientStorageError, OSError) as exc:
            if not _transient(exc) or tried == TRANSIENT_TRIES:
                raise
            log.warning(
                "task %d of pack job %s failed (%s); trying it again in %.0f s (%d of %d)",
                task.index, task.job, exc, delay, tried + 1, TRANSIENT_TRIES,
            )  # fmt: skip
        if stop.wait(delay):
            raise LeaseLost(f"pack worker stopped while task {task.index} waited to try again", job=task.job)
        if lost.is_set():
            raise LeaseLost(
                f"lease of task {task.index} of job {task.job} was lost", job=task.job, task=task.index
            )
        delay = min(delay * 2, 30.0)
    raise AssertionError("unreachable")  # pragma: no cover


def pack_task(
    services: PackServices,
    meta: Mapping[str, Any],
    task: Task,
    *,
    lost: threading.Event | None = None,
    on_sample: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Pack one key range of the source version into one uploaded shard; returns its description."""
    spec = PackSpec.from_dict(meta["spec"])
    source, seq, job = meta["source"], meta["seq"], task.job
    start_after, last = task.payload["start_after"], task.payload["last"]
    # the version is immutable, so the range holds exactly ``count`` records: the listing
    # runs to its end (no cursor left open on the catalog) and must end at ``last``
    count = task.payload["count"]
    records = list(services.catalog.list_records(source, seq, start_after=start_after, limit=count))
    if len(records) != count or records[-1].key != last:
        raise StorageError(
            f"{source}@v{seq} no longer lists {count} records after {start_after!r} up to {last!r}; "
            "the catalog changed under a committed version",
            job=job,
            task=task.index,
        )
    wanted = [r for r in records if is_image_key(r.key) or spec.non_image == "copy"]
    services.cache.hint([r.ref for r in wanted])
    path = services.scratch / scratch_name(job, task.index)
    writer = ShardWriter(path)
    skipped: list[dict[str, str]] = []
    packed: list[str] = []
    copied = source_bytes = 0
    try:
        for record in records:
            if lost is not None and lost.is_set():
                raise LeaseLost(f"lease of task {task.index} of job {job} was lost", job=job, task=task.index)
            sample = _pack_record(services, spec, record, skipped, f"{source}@v{seq}")
            if sample is None:
                continue
            copied += sample.kind == KIND_RAW
            source_bytes += record.size
            writer.put(record.key, encode_sample(sample))
            packed.append(record.key)
            if on_sample is not None:
                on_sample(1)
        keys_count, first, last_key = writer.count, writer.first, writer.last
        if keys_count:
            # no source and no job id (a hash of the source's name): the shard is a file every
            # reader of the target reads; only the lineage names the source (docs/pack.md)
            writer.finish({"task": task.index})
        else:
            writer.abort()
    except BaseException:
        writer.abort()
        path.unlink(missing_ok=True)
        raise
    result: dict[str, Any] = {
        "code_version": CODE_VERSION,  # the finalize commits shards of one code only
        "count": keys_count,
        "skipped": skipped,
        "copied": copied,
        "source_bytes": source_bytes,
    }
    if not keys_count:
        return result
    try:
        result.update(_upload(services.objects, objects_dir(job, meta), task.index, path))
    finally:
        path.unlink(missing_ok=True)
    result.update(first=first, last=last_key, keys=packed)
    return result


def scratch_name(job: str, index: int) -> str:
    """``<job>-<task>-<pid>@<host>.lmdb``: whose shard it is, so that a dead worker's can be told
    from a live one's by the next worker on that host (``sweep_scratch``)."""
    return f"{job}-{index:05d}-{os.getpid()}@{socket.gethostname()}.lmdb"


_SCRATCH_OWNER = re.compile(r"-(\d+)@(.+)\.lmdb(?:\.scratch|\.tmp)?$")


def sweep_scratch(scratch: Path) -> list[Path]:
    """Delete the half-written shards of this host's workers that died (kill -9, OOM killer).

    Why: such a worker runs no cleanup, and its scratch LMDB (up to a shard's size) would stay
    on the node's disk for good; its task goes to another worker once its lease expires, so
    nothing will ever read the file. Files of live processes, and of other hosts (a home on
    shared storage), are kept. Returns what was deleted.
    """
    host, gone = socket.gethostname(), []
    for path in scratch.iterdir():
        owner = _SCRATCH_OWNER.search(path.name)
        if owner is None or owner.group(2) != host or _alive(int(owner.group(1))):
            continue
        path.unlink(missing_ok=True)
        gone.append(path)
    if gone:
        log.info("removed %d scratch file(s) of dead pack workers in %s", len(gone), scratch)
    return gone


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def _pack_record(
    services: PackServices, spec: PackSpec, record: Record, skipped: list[dict[str, str]], where: str
) -> Sample | None:
    """The sample to store for ``record``, or None when it is skipped (and listed in ``skipped``)."""
    image = is_image_key(record.key)
    if not image and spec.non_image != "copy":
        skipped.append({"key": record.key, "reason": "non_image", "error": "not an image (skipped by flag)"})
        return None
    source = {"url": record.url, "etag": record.etag}
    try:
        data = services.cache.read(record.ref)
        if not image:
            return Sample(record.key, KIND_RAW, data, "", 0, 0, record.labels, record.meta, source)
        out = transform_image(data, spec.transform, key=record.key)
    except _BAD_SOURCE as exc:
        if spec.on_corrupt == "fail":
            raise type(exc)(f"{where}: {exc.message}; rerun with --on-corrupt skip to leave it out",
                            **exc.details) from exc  # fmt: skip
        log.warning("skipping %s in %s: %s", record.key, where, exc.message)
        skipped.append({"key": record.key, "reason": exc.code, "error": exc.message})
        return None
    return Sample(record.key, KIND_IMAGE, out.data, out.format, out.width, out.height,
                  record.labels, record.meta, source)  # fmt: skip


def _upload(objects: ObjectStore, folder: str, index: int, path: Path) -> dict[str, Any]:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    sha = digest.hexdigest()
    key = shard_object_name(folder, index, sha)

    try:
        info = objects.stat(key)  # same name = same bytes: an earlier attempt already uploaded it
    except ObjectNotFound:
        with open(path, "rb") as fh:
            info = objects.put(key, fh, size=path.stat().st_size)
    return {"url": objects.url_for(key), "etag": info.etag, "size": info.size, "checksum": f"sha256:{sha}"}


class _Heartbeat:
    """Renews a task's lease every third of its length until stopped; sets ``lost`` on LeaseLost."""

    def __init__(self, queue: TaskQueue, task: Task, lease_seconds: float) -> None:
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._args = (queue, task, lease_seconds)
        self._thread = threading.Thread(target=self._run, name=f"lease-{task.index}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        queue, task, lease = self._args
        while not self._stop.wait(lease / 3):
            try:
                queue.renew(task.job, task.index, task.lease, lease)
            except LeaseLost:
                self.lost.set()
                return
            except DatahubError as exc:  # a database hiccup: try again next beat
                log.warning("could not renew the lease of task %s of job %s: %s", task.index, task.job, exc)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()
