"""An IterableDataset that pulls its work from the task queue (elastic data loading).

Each DataLoader worker of each training process claims one task at a time under a
lease, yields that task's samples, and marks it DONE; then claims the next. Workers and
whole training processes may join mid-epoch (they simply start claiming) or leave (a
clean exit hands the task back at once; a crash hands it back when the lease expires),
and the epoch still covers every task. Delivery is at-least-once: a task whose worker
died after yielding part of it is yielded again in full by whoever takes it over.

A worker with nothing left to claim leaves its epoch when a sibling worker of its own
DataLoader holds a task, and waits (polls) only for tasks held elsewhere: an in-order
DataLoader (its default) waits for the answer of the worker whose turn it is, so a worker
waiting inside that turn for its sibling's task stalled the loader until the lease expired,
and the task was then delivered twice.
"""

from __future__ import annotations

import os
import re
import socket
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from datahub.errors import JobFinished, JobNotFound, LeaseLost, job_not_found
from datahub.tasks import DOING, Task, TaskQueue
from datahub.torch._torch import IterableDataset, get_worker_info
from datahub.validation import check_name


class TaskStream(IterableDataset):
    """Yield ``produce(task)`` for every task of ``job`` this worker manages to claim.

    ``open_queue`` is a picklable zero-argument callable (e.g. ``functools.partial(
    open_task_queue, catalog_url)``): each worker process opens its own connection.
    """

    def __init__(
        self,
        open_queue: Callable[[], TaskQueue],
        job: str,
        produce: Callable[[Task], Iterable[Any]],
        *,
        lease_seconds: float = 60.0,
        poll_seconds: float = 0.5,
        name: str = "",
    ) -> None:
        self.open_queue, self.job, self.produce = open_queue, job, produce
        self.lease_seconds, self.poll_seconds, self.name = lease_seconds, poll_seconds, name
        self.stop = threading.Event()  # set to leave after the current sample
        self._saw_done = False  # this object's last pass ended because the job was over

    def worker_id(self) -> str:
        """``host:pid:worker``, and in a DataLoader worker ``@`` and its loader's mark
        (``_loader_mark``), so a worker can tell which leased tasks its siblings hold."""
        info = get_worker_info()
        label = f"{self.name or socket.gethostname()}:{os.getpid()}:{info.id if info else 0}"
        return f"{label}@{_loader_mark(info)}" if info is not None else label

    def __iter__(self) -> Iterator[Any]:
        """Claim and yield until the job is over; a worker that joins when it already is
        ends at once, quietly. The same object iterated again (in the same process) after
        its pass saw the job over is a JobFinished error (``_job_finished``)."""
        if self._saw_done:
            raise _job_finished(self.job)
        queue = self.open_queue()
        worker = self.worker_id()
        try:
            while not self.stop.is_set():
                task = queue.claim(self.job, worker, self.lease_seconds)
                if task is None:
                    state = self._job(queue)
                    if state.done or state.failed:
                        self._saw_done = True
                        return
                    if _a_sibling_holds_a_task(queue, self.job, worker):
                        return  # the sibling finishes it; this pass did not see the job over
                    self.stop.wait(self.poll_seconds)  # others hold the rest: wait for DONE or expiry
                    continue
                yield from self._run(queue, task, worker)
        finally:
            queue.close()

    def _job(self, queue: TaskQueue) -> Any:
        """The job's state. Why the message: the queue's own cannot tell which kind a missing
        job was to be; this one is an epoch, made by ``shard_epoch``."""
        try:
            return queue.get_job(self.job)
        except JobNotFound as exc:
            raise job_not_found(self.job, "epoch") from exc

    def _run(self, queue: TaskQueue, task: Task, worker: str) -> Iterator[Any]:
        renew_at = queue.clock() + self.lease_seconds / 2
        finished = False
        try:
            for sample in self.produce(task):
                if queue.clock() >= renew_at:  # renewed between samples: no thread per worker
                    queue.renew(self.job, task.index, task.lease, self.lease_seconds)
                    renew_at = queue.clock() + self.lease_seconds / 2
                yield sample
                if self.stop.is_set():
                    return
            finished = True
        except LeaseLost:
            return  # someone else took it over and will deliver it in full
        finally:
            if finished:
                try:
                    queue.complete(self.job, task.index, task.lease, {"worker": worker})
                except LeaseLost:
                    pass
            else:  # leaving early (stop, error, consumer closed the generator): hand it back now
                queue.release(self.job, task.index, task.lease)


def _loader_mark(info: Any) -> str:
    """What the workers of one DataLoader iteration, and only they, share: the main process
    (the workers' parent) and the iteration's base seed (each worker's seed is it plus its id)."""
    return f"{os.getppid()}.{(info.seed - info.id) & 0xFFFFFFFFFFFFFFFF:x}"


def _a_sibling_holds_a_task(queue: TaskQueue, job: str, worker: str) -> bool:
    """Whether another worker of this worker's DataLoader holds a task of ``job`` (DOING).

    Why: an in-order DataLoader (its default) asks its workers in turn and waits for the
    answer of the one whose turn it is. A worker with nothing to claim that waited inside
    that turn for a sibling's task stalled the loader, since the sibling got no request to
    finish the task until the waiter answered; at the lease's expiry the waiter took the task
    over and it was delivered twice. Such a worker leaves its epoch instead: the sibling finishes
    the task (if the sibling dies, the DataLoader itself fails). It still waits for tasks held by
    other processes (one may have died: its tasks come back when their leases expire), and the
    last worker of a loader holding nothing always waits, so the epoch covers every task. Owner
    labels are display labels: a forged one only makes a worker leave its epoch early, never
    gives it a task. Outside a DataLoader (no ``@`` mark) a stream has no siblings.
    """
    host_pid_id, mark, loader = worker.rpartition("@")
    if not mark:
        return False
    host = host_pid_id.rsplit(":", 2)[0] + ":"
    return any(
        task.state == DOING and task.owner != worker and task.owner.startswith(host)
        and task.owner.rpartition("@")[2] == loader
        for task in queue.tasks(job)
    )  # fmt: skip


def _job_finished(job: str) -> JobFinished:
    """The error of a second pass over a finished epoch. Why an error: a DataLoader with
    ``persistent_workers=True`` (what ``recommend_loader_settings`` suggests) iterates its
    workers' copies again each epoch; every task was DONE, so the epoch yielded zero samples
    and the training loop ran it without a word."""
    return JobFinished(
        f"TaskStream over job {job!r} was iterated again after the job was over (every task done): "
        "a job is one epoch and is read once. Make one job per epoch, e.g. "
        f'shard_epoch(queue, f"{job}-{{epoch}}", dataset), and a new TaskStream and '
        "DataLoader over it each epoch, with persistent_workers=False (persistent workers keep "
        "iterating the first epoch's stream; docs/torch.md, TaskStream)",
        job=job,
    )


def shard_epoch(
    queue: TaskQueue,
    job: str,
    shards: int | Any,
    meta: Mapping[str, Any] | None = None,
    *,
    source: str | None = None,
    version: str | None = None,
) -> str:
    """Create (idempotently) a job with one task per packed shard: ``{"shard": i}``.

    ``shards``: the ``PackedDataset`` the epoch reads (``shard_epoch(queue, job, dataset)``),
    or a shard count. A dataset gives the count, its version (``dataset@vN``, recorded as the
    job's ``version`` and in each task's payload) and its name as ``source``; with a count,
    ``version=`` records one. Why: the tasks are shard numbers, so a process joining the job
    with another version's dataset read that version's shards under the first one's tasks,
    and one epoch mixed two versions' samples. A job recording a version refuses another one
    with a Conflict naming the job and both versions (409 through an API server's queue:
    the queue checks it where it stores the job); ``PackedDataset.task_samples`` refuses a
    task of another version's epoch the same way.

    ``source`` names the dataset the epoch reads; it is recorded as the job's ``source``.
    Why: over an API server (``http(s)://`` queue) the job's datasets decide who may work
    it, so with a source every token with the reader role on it may claim the epoch's tasks,
    and a job naming no source is worked by admin tokens only (any token worked it before,
    though nothing said whose data it was). Local queues (SQLite, MongoDB) check nobody.
    """
    if not isinstance(shards, int):
        version = version or _packed_version(shards)
        if source is None and version is not None:
            source = version.rpartition("@")[0]
        shards = len(shards.readers)
    extra = {"version": version} if version is not None else {}
    payloads: Sequence[Mapping[str, Any]] = [{"shard": i, **extra} for i in range(shards)]
    recorded = dict(meta or {"kind": "epoch"})
    if source is not None:
        recorded["source"] = check_name(source)
    recorded.update(extra)
    queue.create_job(job, payloads, recorded)
    return job


def _packed_version(dataset: Any) -> str | None:
    """``dataset@vN`` of a PackedDataset made by ``open`` (None for one built from paths)."""
    name = getattr(dataset, "version", None)
    return name if isinstance(name, str) and re.fullmatch(r".+@v[0-9]+", name) else None
