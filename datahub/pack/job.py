"""A pack job from start to commit: plan tasks, (workers pack them), commit the packed version.

``start_job`` resolves ``SRC@REF``, splits it into tasks (deterministically) and records
them in the catalog's task queue under a job id derived from the inputs, so running the
same pack again resumes the same job. ``finalize`` runs once every task is DONE: it
writes the per-sample index, uploads it, and commits the new version of the target
whose records are exactly the shards plus ``index.json``. The commit carries the job id
as its commit id, so finalizing twice (two workers, or a rerun) yields one version.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from datahub.catalog import Catalog, Delete, Put, Record, Version
from datahub.catalog.model import readers_of
from datahub.errors import (
    BadImage,
    CommitIdReused,
    DatahubError,
    DatasetNotFound,
    InvalidInput,
    JobNotFound,
    NotFound,
    ObjectNotFound,
    StaleBase,
    job_not_found,
)
from datahub.pack.plan import job_id, split
from datahub.pack.spec import PackSpec
from datahub.storage import ObjectStore, StoreRegistry, split_object_url
from datahub.tasks import DONE, Job, Task, TaskQueue
from datahub.validation import check_name
from datahub.words import counted

INDEX_FORMAT = "datahub.pack.index/1"
INDEX_KEY = "index.json"
CODE_VERSION = f"datahub {importlib.metadata.version('datahub')}; pack layout DHS1; shard {INDEX_FORMAT}"
#: what a target's dataset description says (the source is named only in its versions' lineage)
TARGET_DESCRIPTION = "packed by datahub pack (each version's lineage names its source)"
_OBJECTS = re.compile(r"[0-9a-f]{32}")  # a job's ``objects`` name (``objects_dir``)


@dataclass(frozen=True)
class PackResult:
    job: str
    version: Version
    shards: int
    samples: int
    copied: int
    skipped: list[dict[str, str]] = field(default_factory=list)  # every record left out, by key


def parse_source(text: str) -> tuple[str, str | None]:
    """``"imagenet@v3"`` -> ("imagenet", "v3"); ``"imagenet"`` -> ("imagenet", None = latest)."""
    name, _, ref = text.partition("@")
    check_name(name)
    if "@" in text and not ref:
        raise InvalidInput(f"invalid source {text!r}: use DATASET@REF, e.g. imagenet@v3 or imagenet@latest")
    return name, ref or None


def start_job(
    catalog: Catalog, queue: TaskQueue, source: str, target: str, spec: PackSpec, *, restart: bool = False
) -> Job:
    """Create (or find again) the job packing ``source`` (``DATASET[@REF]``) into ``target``.

    Re-running resumes: DONE tasks stay done, FAILED ones go back to TODO (e.g. after
    switching to ``--on-corrupt skip``). Nothing is written if the source is refused.
    ``restart`` drops the job's tasks first, so every task is packed again (after the
    finalize refused a task's reported shard, say).

    The target dataset is created here, by the caller, if it is missing: the workers' shards
    become its records, and a worker may work the job only with the writer role on it
    (``api/routes/tasks.py``). Created at the finalize instead, it stayed free to take while
    the job ran: any token could create a dataset of that name first, own it, work the job
    and read the packed records of a source it may not read.
    """
    name, ref = parse_source(source)
    check_name(target)
    if target == name:
        raise InvalidInput(f"pack target {target!r} must differ from the source dataset", dataset=target)
    version = catalog.resolve(name, ref)
    _refuse_unpacked_head(catalog, target, name)
    job = job_id(name, version.seq, target, spec)
    payloads = split(catalog.list_records(name, version.seq), spec, source=f"{name}@v{version.seq}")
    if not payloads:
        raise InvalidInput(f"{name}@v{version.seq} has no records to pack", dataset=name)
    _ensure_target(catalog, target, name)
    meta = {
        "kind": "pack",
        "source": name,
        "seq": version.seq,
        "target": target,
        "spec": spec.to_dict(),
        "code_version": CODE_VERSION,
    }
    if restart:
        queue.delete_job(job)
    else:
        meta["code_version"] = _resumed_code(queue, job)
    meta.update(_objects_of(queue, job))
    queue.create_job(job, payloads, meta)
    queue.retry_failed(job)
    return queue.get_job(job)


def packed_by(result: Mapping[str, Any], meta: Mapping[str, Any]) -> str:
    """The code that packed a task's shard: named in its result (``CODE_VERSION``), or, for a
    result of a worker from before that, the job's."""
    return str(result.get("code_version") or meta.get("code_version", ""))


def _resumed_code(queue: TaskQueue, job: str) -> str:
    """The ``code_version`` of ``job`` resumed by this code: ``CODE_VERSION``, or the code that
    packed every task if none is left to pack. InvalidInput when the job's DONE shards were
    packed by another code and this one would pack the rest (or by several codes already).

    Why: a job resumed after an upgrade (or worked by ``pack-worker``s of two releases) kept
    the shards the old code had made and packed the rest with the new one, whose transform
    may make other bytes of the same picture; the version mixed them without a word, and its
    lineage named the new code for all (packed43)."""
    try:
        known = queue.get_job(job)
    except JobNotFound:
        return CODE_VERSION
    tasks = list(queue.tasks(job))
    codes = {packed_by(t.result, known.meta) for t in tasks if t.state == DONE}
    if any(t.state != DONE for t in tasks):
        codes.add(CODE_VERSION)
    if len(codes) > 1:
        others = sorted(codes - {CODE_VERSION})
        raise InvalidInput(
            f"pack job {job} was partly packed by another datahub ({'; '.join(others)}), and this "
            f"is {CODE_VERSION}: one version must not mix their shards (the same picture may be "
            "packed into other bytes). Pack again with --restart (every shard packed by this "
            f"datahub), or finish the job with the datahub that started it",
            job=job,
            packed_by=others,
        )
    return codes.pop() if codes else CODE_VERSION


def _objects_of(queue: TaskQueue, job: str) -> dict[str, str]:
    """The ``objects`` name of ``job``'s meta (``objects_dir``): a resumed job keeps the one
    its shards were uploaded under (none for a job created before there was one: the job id
    names its folder); a new job draws one. Two starts of one new job at the same moment may
    each draw one; the last meta written wins, and a shard uploaded under the other folder
    meanwhile fails the finalize's check with its advice (``--restart``): nothing wrong is
    committed."""
    try:
        known = queue.get_job(job).meta
    except JobNotFound:
        return {"objects": secrets.token_hex(16)}
    return {"objects": known["objects"]} if "objects" in known else {}


def job_state(queue: TaskQueue, job: str) -> Job:
    """``queue.get_job`` of a pack job: a missing one says to run `datahub pack` (the queue's
    own message cannot tell a pack job from a TaskStream's epoch)."""
    try:
        return queue.get_job(job)
    except JobNotFound:
        raise job_not_found(job, "pack") from None


def failure(queue: TaskQueue, job: str) -> BadImage | None:
    """The error that failed ``job`` (a record under ``--on-corrupt fail``), if any."""
    for task in queue.tasks(job):
        if task.error:
            return BadImage(f"pack job {job} failed: {task.error}", job=job, task=task.index)
    return None


def finalize(
    catalog: Catalog,
    queue: TaskQueue,
    objects: ObjectStore,
    job: str,
    *,
    stores: StoreRegistry,
    author: str = "",
) -> PackResult:
    """Commit the packed version once every task is DONE (idempotent: one version per job).

    ``objects`` receives the index; ``stores`` reaches the shards the workers uploaded (each
    worker under its own ``objects_url``), which are checked before anything is committed
    (``_checked_shard``)."""
    state = job_state(queue, job)
    if not state.done:
        raise InvalidInput(
            f"pack job {job} is not finished ({dict(state.counts)}); run `datahub pack-worker --job {job}`",
            job=job,
        )
    meta = state.meta
    tasks = list(queue.tasks(job))
    results = [t.result for t in tasks]
    folder = objects_dir(job, meta)
    codes = sorted({packed_by(t.result, meta) for t in tasks})
    if len(codes) > 1:  # workers of two releases worked it at once (``_resumed_code``)
        raise InvalidInput(
            f"pack job {job}: its shards were packed by different datahub releases ({' / '.join(codes)}); "
            "nothing was committed. Pack again with --restart, with workers of one release",
            job=job,
            packed_by=codes,
        )
    shards = [_checked_shard(stores, t, folder) for t in tasks if t.result.get("count")]
    skipped = [s for r in results for s in r.get("skipped", [])]
    samples = sum(r["count"] for r in shards)
    source = f"{meta['source']}@v{meta['seq']}"
    # No source, no job id (a hash of the source's name and version): every reader of the
    # target reads the index, and only the version's lineage may name the source (to those
    # who may read it, datahub.api.lineage). Indexes of older packs have both; no reader uses them.
    index = {
        "format": INDEX_FORMAT,
        "count": samples,
        "shards": [
            {"record": _shard_key(i, len(shards)), "count": r["count"], "keys": r["keys"]}
            for i, r in enumerate(shards)
        ],
        "skipped": skipped,
    }
    blob = json.dumps(index, sort_keys=True, separators=(",", ":")).encode()
    sha = hashlib.sha256(blob).hexdigest()
    key = f"packs/{objects_dir(job, meta)}/index-{sha[:16]}.json"
    try:
        info = objects.stat(key)
    except ObjectNotFound:
        info = objects.put(key, blob)
    records = [
        Record(
            _shard_key(i, len(shards)),
            r["url"],
            r["etag"],
            r["size"],
            r["checksum"],
            meta={"count": r["count"], "first": r["first"], "last": r["last"], "copied": r["copied"]},
        )
        for i, r in enumerate(shards)
    ]
    records.append(Record(INDEX_KEY, objects.url_for(key), info.etag, info.size, f"sha256:{sha}"))
    lineage = {
        "kind": "pack",
        "source": source,
        "source_dataset": meta["source"],
        "source_version": meta["seq"],
        "params": meta["spec"],
        "code_version": codes[0] if codes else meta["code_version"],
        "job": job,
        "samples": samples,
        "skipped": len(skipped),
    }
    commit_id = pack_commit_id(job, meta)
    version = _commit(catalog, meta["target"], records, source, lineage, job, author, commit_id=commit_id)
    copied = sum(r["copied"] for r in shards)
    return PackResult(job, version, len(shards), samples, copied, skipped)


def objects_dir(job: str, meta: Mapping[str, Any]) -> str:
    """The folder below ``packs/`` of a job's shards and index: the random ``objects`` name
    drawn when the job was created (``start_job``), or the job id for a job created before.

    Why not the job id: it is a hash of the source's name and version, the target and the
    parameters, and a record's URL is shown to every reader of the target, who knows the
    rest: a reader who may not read the source could confirm a guess of its name. The random
    name is bound to the job all the same (it is in the job's meta, in the server's queue),
    so the finalize and the API's record-URL rule still tell this job's objects from any other."""
    name = meta.get("objects")
    return name if isinstance(name, str) and _OBJECTS.fullmatch(name) else job


def pack_commit_id(job: str, meta: Mapping[str, Any]) -> str:
    """The commit id of ``job``'s version: its random objects name (``objects_dir``), or the job
    id for a job created before there was one.

    Why not the job id: the catalog answers a commit id it has seen before the base of the
    commit that sends it (a retry is a replay), so a writer of the target, who knows all the
    job id hashes but the source (the parameters are in the lineage), sent a commit on a stale
    base with the id of a guess: ``commit_id_reused`` for the right source name and version,
    ``stale_base`` for any other, nothing written (caller33). The random name is bound to the
    job all the same, so concurrent finalizes still meet on one id."""
    folder = objects_dir(job, meta)
    return job if folder == job else f"pack-{folder}"


def shard_object_name(folder: str, index: int, sha256_hex: str) -> str:
    """Where a worker uploads task ``index``'s shard, below its ``objects_url``: named by the
    job's folder (``objects_dir``), the task and the content, so a retry or a late duplicate
    never overwrites bytes a version already points at, and the finalize can tell this job's
    shard from any other."""
    return f"packs/{folder}/shard-{index:05d}-{sha256_hex[:16]}.lmdb"


def _checked_shard(stores: StoreRegistry, task: Task, folder: str) -> dict[str, Any]:
    """``task``'s result, once it is known to describe the shard this job uploaded for it.

    Why: a result is what a worker reported, and a remote worker reports with any token that
    may write the target (``/v1/tasks``), while the finalize commits as whoever runs it,
    often a global admin. Trusted as reported, a writer's result of ``file:///…`` (the
    server's disk) or of any other object became a record only a global admin may commit
    over HTTP, read by every reader of the target. So the URL must name this task's shard
    (``shard_object_name``, whichever worker's ``objects_url`` it is under) and the object
    must be there with the reported etag and size; the checksum's digest is in the name.
    """
    result = dict(task.result)
    url, checksum = result.get("url"), result.get("checksum")
    digest = checksum[7:] if isinstance(checksum, str) and checksum.startswith("sha256:") else ""
    why = ""
    try:
        if not isinstance(url, str) or len(digest) != 64:
            why = "it names no uploaded shard (a URL and a sha256 checksum)"
        else:
            _, key = split_object_url(url)
            name = shard_object_name(folder, task.index, digest)
            if key != name and not key.endswith("/" + name):
                why = (
                    f"it is not this task's shard (its object is named {name!r} below a worker's objects_url)"
                )
            else:
                store, relative = stores.for_url(url)  # the objects bucket with objects_s3's keys
                info = store.stat(relative)
                if (info.etag, info.size) != (result.get("etag"), result.get("size")):
                    why = f"the object there has etag {info.etag} and {info.size} bytes, not as reported"
    except DatahubError as exc:  # a URL no store reads, a missing object, an unreachable store
        why = exc.message
    if why:
        raise InvalidInput(
            f"pack job {task.job}: task {task.index}, completed by worker {task.owner!r}, reported the "
            f"shard {url!r}, which the finalize does not commit: {why}. Nothing was committed. If that "
            "worker is not one of yours, revoke its token; then pack again with --restart to redo every task",
            job=task.job,
            task=task.index,
            worker=task.owner,
        )
    return result


def _shard_key(i: int, n: int) -> str:
    return f"shards/{i:05d}-of-{n:05d}.lmdb"


def _refuse_unpacked_head(catalog: Catalog, target: str, source: str) -> None:
    """InvalidInput when ``target`` holds versions and a pack made none of them. Why: the
    pack's commit deletes every record of the target's head (its records are exactly the
    shards and the index), so ``datahub pack photos --to pets`` with ``pets`` an imported
    dataset made a ``pets`` head of shards alone, without a word (newuser36). A target that
    is missing, has no version yet, or has a version a pack made (a new pack of it, a job
    run again after another writer's version on top) goes on."""
    try:
        versions = catalog.log(target)
        head = next(iter(versions), None)
    except NotFound:
        return
    if head is None or any(v.lineage.get("kind") == "pack" for v in catalog.log(target)):
        return
    made = f"{target}@v{head.seq}, {counted(head.record_count, 'record')}" + (
        f": {head.message!r}" if head.message else ""
    )
    raise InvalidInput(
        f"pack target {target!r} holds versions no pack made ({made}); the pack's commit would "
        f"delete every record of its head: give a new dataset, e.g. --to {source}-packed",
        dataset=target,
    )


def _ensure_target(catalog: Catalog, target: str, source: str) -> None:
    """The target dataset, created if missing (jobs started before it was created at the
    start still meet a missing one at their finalize). Its description does not name the
    source: the target's readers may not read it (``TARGET_DESCRIPTION``). Its access list
    gives the reader role to the source's readers (``_source_readers``)."""
    try:
        catalog.get_dataset(target)
    except DatasetNotFound:
        # outside the try below: a refused copy (a bucket snapshot's, ``readers_of``) is its
        # own answer, not a target "created meanwhile" that is then not found
        acl = _source_readers(catalog, source, target)
        try:
            catalog.create_dataset(target, description=TARGET_DESCRIPTION, acl=acl)
        except Exception:  # created meanwhile (a concurrent start or finalize)
            catalog.get_dataset(target)


def _source_readers(catalog: Catalog, source: str, target: str) -> dict[str, str]:
    """The access list a new target starts with: the source's owner and access-list
    principals as readers (``readers_of``). Why: created with none, the target was open to
    every pod (the CSI plugin's rule for a dataset with no owner and no access list,
    docs/csi.md) while the API hid it from every token but a global admin's: a pod with no
    role on a restricted source mounted its packed copy (review32). Writing the target
    (working its job) is granted apart."""
    return readers_of(catalog.get_dataset(source), target)  # read by the caller already: it packs it


def _commit(
    catalog: Catalog,
    target: str,
    records: list[Record],
    source: str,
    lineage: dict[str, Any],
    job: str,
    author: str,
    *,
    commit_id: str | None = None,
) -> Version:
    """Commit ``records`` as ``target``'s version of pack ``job``, under ``commit_id`` (default:
    the job id), once: a version of this job at the head answers (one committed under the job
    id before ``pack_commit_id``, finalized again: a commit would add an empty version)."""
    _ensure_target(catalog, target, source.partition("@")[0])  # source: "name@vN"
    commit_id = commit_id or job
    wanted = {r.key for r in records}
    head = catalog.store.head(target)
    if head and commit_id != job:
        found = catalog.store.get_version(target, head)
        if (
            isinstance(found.lineage, dict)
            and found.lineage.get("kind") == "pack"
            and found.lineage.get("job") == job
        ):
            return found
    for _ in range(3):  # a concurrent finalize of the same job may win: then its commit id answers
        head = catalog.store.head(target)
        stale = [Delete(r.key) for r in catalog.list_records(target, head)] if head else []
        changes = [Put(r) for r in records] + [d for d in stale if d.key not in wanted]
        try:
            return catalog.commit(
                target,
                changes,
                base=head,
                message=f"pack {source}",
                author=author,
                lineage=lineage,
                commit_id=commit_id,
            )
        except StaleBase:
            continue
        except CommitIdReused as exc:
            # a concurrent finalize of this job committed first, on another head (so with other
            # deletes): the job's version is that one
            return catalog.resolve(target, int(exc.details["version"]))  # type: ignore[call-overload]
    raise StaleBase(f"dataset {target} kept moving while committing pack job {job}; rerun it", dataset=target)
