"""The durable task queue contract: jobs split into numbered tasks handed out under leases.

A task moves TODO -> DOING (owned by one worker until ``lease_until``) -> DONE, or FAILED
when its work reported a permanent error. A DOING task whose lease has expired is
claimable again (lease stealing): that is how a worker that died or hung gives its task
back without anybody noticing its death. Claims are atomic in the store, so of two
workers racing for one task exactly one wins.

The queue lives in the catalog's database (same SQLite file, same Mongo database) so a
job is exactly as durable and as shared as the catalog it writes to. Time comes from an
injected clock (wall-clock seconds by default, since leases are compared across machines).
"""

from __future__ import annotations

import abc
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from datahub.errors import JobNotFound, LeaseLost

TODO, DOING, DONE, FAILED = "TODO", "DOING", "DONE", "FAILED"
STATES = (TODO, DOING, DONE, FAILED)

Clock = Callable[[], float]
__all__ = [
    "DOING",
    "DONE",
    "FAILED",
    "STATES",
    "TODO",
    "Clock",
    "Job",
    "JobNotFound",
    "LeaseLost",
    "Task",
    "TaskQueue",
]


@dataclass(frozen=True, slots=True)
class Task:
    job: str
    index: int
    state: str
    payload: Mapping[str, Any]
    owner: str = ""
    lease_until: float = 0.0
    attempts: int = 0
    result: Mapping[str, Any] = field(default_factory=dict)
    error: str = ""


@dataclass(frozen=True, slots=True)
class Job:
    job: str
    meta: Mapping[str, Any]
    total: int
    counts: Mapping[str, int]  # state -> number of tasks
    created_at: float = 0.0

    @property
    def done(self) -> bool:
        return self.counts.get(DONE, 0) == self.total

    @property
    def failed(self) -> bool:
        return self.counts.get(FAILED, 0) > 0


class TaskQueue(abc.ABC):
    """Implemented by ``SqliteTaskQueue`` and ``MongoTaskQueue``; one conformance suite tests both."""

    clock: Clock = time.time

    @abc.abstractmethod
    def create_job(self, job: str, payloads: Sequence[Mapping[str, Any]], meta: Mapping[str, Any]) -> Job:
        """Create ``job`` with one TODO task per payload (task i gets ``payloads[i]``).

        Idempotent: if the job exists with the same number of tasks, its tasks are left as
        they are (DONE work stays done) and only ``meta`` is replaced; a different task
        count raises Conflict, since a deterministic split of one input never changes.
        """

    @abc.abstractmethod
    def get_job(self, job: str) -> Job:
        """Meta and per-state counts; JobNotFound naming the job if absent."""

    @abc.abstractmethod
    def claim(self, job: str, worker: str, lease_seconds: float) -> Task | None:
        """Atomically take the lowest-numbered TODO task, or a DOING task whose lease expired.

        None when nothing is claimable right now (all DONE/FAILED, or leased by live workers).
        """

    @abc.abstractmethod
    def renew(self, job: str, index: int, worker: str, lease_seconds: float) -> Task:
        """Extend the lease; LeaseLost if ``worker`` no longer owns the task."""

    @abc.abstractmethod
    def complete(self, job: str, index: int, worker: str, result: Mapping[str, Any]) -> Task:
        """DOING -> DONE with ``result``; LeaseLost if ``worker`` lost the task meanwhile."""

    @abc.abstractmethod
    def fail(self, job: str, index: int, worker: str, error: str) -> Task:
        """DOING -> FAILED with ``error`` (a permanent failure); LeaseLost as for complete."""

    @abc.abstractmethod
    def release(self, job: str, index: int, worker: str) -> None:
        """DOING -> TODO: a worker leaving gracefully hands its task back at once."""

    @abc.abstractmethod
    def retry_failed(self, job: str) -> int:
        """FAILED -> TODO for every failed task of ``job``; returns how many."""

    @abc.abstractmethod
    def tasks(self, job: str) -> Iterator[Task]:
        """Every task of ``job`` in index order."""

    @abc.abstractmethod
    def delete_job(self, job: str) -> None:
        """Remove a job and its tasks (idempotent)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the connection."""
