"""Wire models of the task-queue routes (``datahub.api.routes.tasks``), for remote pack workers."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from datahub.api.schemas import RequestModel
from datahub.tasks.base import Job, Task

_LEASE = Field(gt=0, le=86400, description="seconds the lease lasts from now (the server's clock)")
_LEASE_ID = Field(max_length=256, description="the lease id the claim returned (none: lease_lost)")


class JobCreate(RequestModel):
    payloads: list[dict[str, Any]] = Field(max_length=1_000_000)
    meta: dict[str, Any] = Field(default_factory=dict)


class Claim(RequestModel):
    worker: str = Field(min_length=1, max_length=256, description="a display label, not an identity")
    lease_seconds: float = _LEASE
    claim_id: str = Field(
        default="",
        max_length=64,
        description="the caller's id for this claim, the same on a retry: a repeated id answers the "
        "task claimed under it while the caller still holds it (none: always a fresh claim)",
    )


class Renewal(RequestModel):
    lease: str = _LEASE_ID
    lease_seconds: float = _LEASE


class Completion(RequestModel):
    lease: str = _LEASE_ID
    result: dict[str, Any] = Field(default_factory=dict)


class Failure(RequestModel):
    lease: str = _LEASE_ID
    error: str = Field(max_length=65536)


class Held(RequestModel):
    lease: str = _LEASE_ID


class JobPublic(BaseModel):
    job: str
    meta: dict[str, Any]
    total: int
    counts: dict[str, int]
    created_at: float


class TaskPublic(BaseModel):
    job: str
    index: int
    state: str
    payload: dict[str, Any]
    owner: str
    lease_until: float
    attempts: int
    result: dict[str, Any]
    error: str
    lease: str = Field("", description="the lease id: only in a claim's answer, to its claimer")


class Claimed(BaseModel):
    task: TaskPublic | None = Field(description="null: nothing claimable right now")


class RetriedCount(BaseModel):
    count: int


def job_public(j: Job) -> JobPublic:
    return JobPublic(
        job=j.job, meta=dict(j.meta), total=j.total, counts=dict(j.counts), created_at=j.created_at
    )


def task_public(t: Task, *, with_lease: bool = False) -> TaskPublic:
    """``with_lease`` only for the claimer: a lease id shown to anybody else would be a key to the task."""
    return TaskPublic(
        job=t.job,
        index=t.index,
        state=t.state,
        payload=dict(t.payload),
        owner=t.owner,
        lease_until=t.lease_until,
        attempts=t.attempts,
        result=dict(t.result),
        error=t.error,
        lease=t.lease if with_lease else "",
    )
