"""The local executor: N worker processes on this machine running the ``work`` loop.

Processes (spawned, not forked: each opens its own catalog, cache and LMDB handles)
pull tasks from the queue exactly like remote ``datahub pack-worker`` processes, so a
local run and a cluster run are the same protocol; remote workers may join a local run.
The parent only watches: it reports progress from the queue and, if interrupted, stops
its children and hands their tasks back at once instead of waiting for lease expiry.
"""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable

from datahub.config import Config
from datahub.errors import Cancelled, StorageError
from datahub.pack.worker import PackServices, work, worker_name
from datahub.tasks import DOING, TaskQueue

POLL_SECONDS = 0.25
EXIT_GRACE_SECONDS = 30.0


def _worker_main(config: Config, job: str, name: str, lease_seconds: float) -> None:
    services = PackServices.open(config)
    try:
        work(services, job, worker=name, lease_seconds=lease_seconds)
    finally:
        services.close()


def run_local(
    config: Config,
    queue: TaskQueue,
    job: str,
    *,
    workers: int,
    lease_seconds: float = 60.0,
    on_progress: Callable[[int, int], None] | None = None,
    cancel: threading.Event | None = None,
) -> None:
    """Run ``workers`` processes until the job is DONE or FAILED; raises if they all died first."""
    ctx = multiprocessing.get_context("spawn")
    names = [worker_name(f"local{i}") for i in range(workers)]
    procs = [
        ctx.Process(target=_worker_main, args=(config, job, name, lease_seconds), name=name, daemon=True)
        for name in names
    ]
    cancel = cancel or threading.Event()
    for p in procs:
        p.start()
    try:
        while any(p.is_alive() for p in procs):
            if cancel.wait(POLL_SECONDS):
                raise Cancelled(f"pack job {job} cancelled; rerun the same command to resume", job=job)
            state = queue.get_job(job)
            if on_progress is not None:
                on_progress(state.counts.get("DONE", 0), state.total)
            if state.done or state.failed:
                break  # idle workers notice on their next poll and exit by themselves
        for p in procs:
            p.join(timeout=EXIT_GRACE_SECONDS)
    except BaseException:
        for p in procs:
            p.terminate()
        for p in procs:
            p.join()
        for task in queue.tasks(job):
            if task.state == DOING and task.owner in names:
                queue.release(job, task.index, task.owner)
        raise
    state = queue.get_job(job)
    if not (state.done or state.failed):
        codes = ", ".join(f"{p.name}={p.exitcode}" for p in procs)
        raise StorageError(
            f"pack job {job}: every worker exited before the job finished ({codes}); "
            "rerun the same command to resume (DONE shards are kept)",
            job=job,
        )
