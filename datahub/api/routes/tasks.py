"""/v1/tasks/jobs: the server's task queue (next to its catalog) for pack workers on other hosts.

Why: a node then needs an API token, not the database. Creating, deleting and retrying a
job are admin operations (a job is a unit of work of the whole deployment). A worker's calls
are checked against the datasets the job's meta names, since working a job is reading its
``source`` and writing its ``target`` (``datahub.pack.job.finalize`` commits the shard URLs
the workers report as the target's records): reading the job or its tasks needs the reader
role on the source, and on the target once it exists (the meta names it, the results are its
shards), and claim, renew, complete, fail and release need the writer role on the
target as well; while the target does not exist (``datahub pack`` creates it at the start)
only admins work the job, since no role on it can be checked yet. A job whose source (or
existing target) the caller may not read answers as a missing job, so its name, source and
target stay unknown. Admins
work every job; a job naming no source (``shard_epoch`` without ``source=``) is read and
worked by admins only (403 saying so): with no dataset to check, any valid token claimed its
tasks and read their payloads. Then the lease decides
which caller may renew, finish, fail or release which task: a claim's answer carries a new
lease id, recorded with the caller's principal as its holder, and the other calls present it
(``datahub.tasks.base``); the worker name in a claim is only a label. Listings never show a
lease id, so a reader of the job cannot act on a task it did not claim.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request, Response, status
from fastapi.responses import StreamingResponse

from datahub.api.access import Principal, can, require
from datahub.api.deps import PrincipalDep, Services, ServicesDep, authenticate
from datahub.api.routes.pagination import NDJSON
from datahub.api.routes.remote import stream_listing
from datahub.api.task_models import (
    Claim,
    Claimed,
    Completion,
    Failure,
    Held,
    JobCreate,
    JobPublic,
    Renewal,
    RetriedCount,
    TaskPublic,
    job_public,
    task_public,
)
from datahub.errors import (
    AccessDenied,
    DatahubError,
    DatasetNotFound,
    JobNotFound,
    NotFound,
    Unauthenticated,
    job_not_found,
)

# Not in the public OpenAPI: the wire contract of datahub.tasks.http, held by the task-queue
# conformance suite run over a real server (docs/api.md, "Remote store").
router = APIRouter(prefix="/v1/tasks/jobs", tags=["tasks"], include_in_schema=False)
JobPath = Annotated[str, Path(description="job name", max_length=256)]
IndexPath = Annotated[int, Path(ge=0, le=2**31)]


def _admin(principal: PrincipalDep) -> Principal:
    if not principal.is_admin:
        raise AccessDenied("creating, deleting and retrying jobs needs an admin token")
    return principal


AdminDep = Annotated[Principal, Depends(_admin)]


def _may_work(services: Services, principal: Principal, job: str, *, write: bool) -> None:
    """Raise unless ``principal`` may read (``write=False``) or work (``write=True``) ``job``.

    A pack worker holding a token with no role on the source would otherwise read the source's
    key ranges and report forged shards that become the target's records."""
    if principal.is_admin:
        return
    meta = services.tasks.get_job(job).meta  # JobNotFound for a missing job
    source, target = meta.get("source"), meta.get("target")
    if not isinstance(source, str):
        # no dataset says whose work this is, so no role can be checked: any valid token
        # claimed such a job (an epoch made by shard_epoch without source=) and read its payloads
        raise AccessDenied(
            f"task job {job!r} names no source dataset, so only an admin token may read or work it; "
            f"to let readers of a dataset work it, create it with its source "
            f'(shard_epoch(queue, {job!r}, shards, source=DATASET), or "source" in the job\'s meta)',
            job=job,
        )
    if not _reads(services, principal, source):
        raise _missing(job)
    if isinstance(target, str) and _hidden(services, principal, target):
        # the meta names the target and the tasks' results are its shards: an existing target
        # the caller may not read answers as missing everywhere else, so the job does too, on
        # the workers' routes as well (they answered the target's own 404, naming it: audit15)
        raise _missing(job)
    if write and isinstance(target, str):
        try:
            dataset = services.catalog.get_dataset(target)
        except DatasetNotFound:
            # whoever finalizes creates it; until then no role on it can be checked, and a
            # reader of the source (often every caller: '*') must not write its first version
            raise AccessDenied(
                f"pack job {job!r} writes dataset {target!r}, which does not exist yet: only an admin "
                f"token may work it until it does; to let {principal.name!r} work it, create it and "
                f"grant the writer role (datahub dataset create {target}; "
                f"datahub dataset update {target} --grant {principal.name}=writer)",
                job=job,
                dataset=target,
            ) from None
        require(principal, dataset, "writer")


def _missing(job: str) -> JobNotFound:
    """The very answer a job that does not exist gives."""
    return job_not_found(job)


def _hidden(services: Services, principal: Principal, name: str) -> bool:
    """Whether ``name`` exists and the caller may not read it (a missing one hides nothing)."""
    try:
        return not can(principal, services.catalog.get_dataset(name), "reader")
    except DatasetNotFound:
        return False


def _reads(services: Services, principal: Principal, name: str) -> bool:
    try:
        return can(principal, services.catalog.get_dataset(name), "reader")
    except DatasetNotFound:
        return False


def _reader(job: JobPath, services: ServicesDep, principal: PrincipalDep) -> Principal:
    _may_work(services, principal, job, write=False)
    return principal


def _worker(job: JobPath, services: ServicesDep, principal: PrincipalDep) -> Principal:
    _may_work(services, principal, job, write=True)
    return principal


ReaderDep = Annotated[Principal, Depends(_reader)]
WorkerDep = Annotated[Principal, Depends(_worker)]


@router.put("/{job}")
def create_job(job: JobPath, body: JobCreate, services: ServicesDep, principal: AdminDep) -> JobPublic:
    """Idempotent: an existing job with as many tasks keeps its done work (only meta is replaced);
    a meta naming another ``version`` than the job recorded is a 409 Conflict (``joined_meta``)."""
    return job_public(services.tasks.create_job(job, body.payloads, body.meta))


@router.get("/{job}")
def get_job(job: JobPath, services: ServicesDep, principal: ReaderDep) -> JobPublic:
    return job_public(services.tasks.get_job(job))


@router.delete("/{job}", status_code=status.HTTP_204_NO_CONTENT)
def delete_job(job: JobPath, services: ServicesDep, principal: AdminDep) -> Response:
    services.tasks.delete_job(job)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/{job}/claim")
def claim(job: JobPath, body: Claim, services: ServicesDep, principal: WorkerDep) -> Claimed:
    task = services.tasks.claim(
        job, body.worker, body.lease_seconds, holder=principal.name, claim_id=body.claim_id
    )
    return Claimed(task=task_public(task, with_lease=True) if task is not None else None)


@router.post("/{job}/tasks/{index}/renew")
def renew(
    job: JobPath, index: IndexPath, body: Renewal, services: ServicesDep, principal: WorkerDep
) -> TaskPublic:
    return task_public(
        services.tasks.renew(job, index, body.lease, body.lease_seconds, holder=principal.name)
    )


@router.post("/{job}/tasks/{index}/complete")
def complete(
    job: JobPath, index: IndexPath, body: Completion, services: ServicesDep, principal: WorkerDep
) -> TaskPublic:
    return task_public(services.tasks.complete(job, index, body.lease, body.result, holder=principal.name))


@router.post("/{job}/tasks/{index}/fail")
def fail(
    job: JobPath, index: IndexPath, body: Failure, services: ServicesDep, principal: WorkerDep
) -> TaskPublic:
    return task_public(services.tasks.fail(job, index, body.lease, body.error, holder=principal.name))


@router.post("/{job}/tasks/{index}/release", status_code=status.HTTP_204_NO_CONTENT)
def release(
    job: JobPath, index: IndexPath, body: Held, services: ServicesDep, principal: WorkerDep
) -> Response:
    services.tasks.release(job, index, body.lease, holder=principal.name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/{job}/retry-failed")
def retry_failed(job: JobPath, services: ServicesDep, principal: AdminDep) -> RetriedCount:
    return RetriedCount(count=services.tasks.retry_failed(job))


@router.get(
    "/{job}/tasks",
    response_class=StreamingResponse,
    responses={
        200: {"content": {NDJSON: {}}, "description": 'TaskPublic lines in index order, then {"end": n}'}
    },
)
def tasks(request: Request, job: JobPath, services: ServicesDep, principal: ReaderDep) -> StreamingResponse:
    """The job's tasks; like the remote listings (``deps.still_allowed``), the listing stops
    without its ``{"end": n}`` line once the caller's token is revoked, or its role on the
    job's datasets removed, while it streams (caller43)."""
    authorization = request.headers.get("authorization", "")

    def still_allowed() -> DatahubError | None:
        try:
            _may_work(services, authenticate(authorization, services), job, write=False)
        except (Unauthenticated, AccessDenied, NotFound) as exc:
            return exc
        return None

    return stream_listing(iter(services.tasks.tasks(job)), task_public, still_allowed)
