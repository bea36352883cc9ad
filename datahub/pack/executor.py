"""The local executor: N worker processes on this machine running the ``work`` loop.

Each worker is a fresh interpreter running ``python -m datahub.pack.worker_process``
(the parent's Config on its stdin), so it opens its own catalog, cache and LMDB handles,
never re-imports the caller's ``__main__`` (no ``if __name__ == "__main__"`` guard needed,
no torch import per worker when called from a training script), and pulls tasks from the
queue exactly like remote ``datahub pack-worker`` processes — which may join a local run.
The parent only watches: it reports progress from the queue and, if interrupted, stops
its children and hands their tasks back at once instead of waiting for lease expiry. It
can, since it opened the same database: its listing shows the children's lease ids. Over an
API server (``http(s)://`` catalog) a listing never shows lease ids, so there the children's
tasks come back when their leases expire.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from datahub.config import Config
from datahub.errors import Cancelled, StorageError
from datahub.pack.worker import worker_name
from datahub.tasks import DOING, TaskQueue

POLL_SECONDS = 0.25
EXIT_GRACE_SECONDS = 30.0
_ROOT = str(Path(__file__).resolve().parents[2])  # children import this same datahub


def _start(config: Config, job: str, name: str, lease_seconds: float) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [_ROOT, os.environ.get("PYTHONPATH")]))}
    argv = [sys.executable, "-m", "datahub.pack.worker_process", "--job", job, "--name", name,
            "--lease", str(lease_seconds)]  # fmt: skip
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, env=env, text=True)
    assert proc.stdin is not None
    proc.stdin.write(config.model_dump_json())
    proc.stdin.close()
    return proc


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
    names = [worker_name(f"local{i}") for i in range(workers)]
    cancel = cancel or threading.Event()
    procs: list[subprocess.Popen] = []
    try:
        procs.extend(_start(config, job, name, lease_seconds) for name in names)
        while any(p.poll() is None for p in procs):
            if cancel.wait(POLL_SECONDS):
                raise Cancelled(f"pack job {job} cancelled; rerun the same command to resume", job=job)
            state = queue.get_job(job)
            if on_progress is not None:
                on_progress(state.counts.get("DONE", 0), state.total)
            if state.done or state.failed:
                break  # idle workers notice on their next poll and exit by themselves
        for p in procs:
            p.wait(timeout=EXIT_GRACE_SECONDS)
    except BaseException:
        for p in procs:
            p.terminate()  # each hands its own task back by its lease, then exits
        for p in procs:
            try:
                p.wait(timeout=EXIT_GRACE_SECONDS)
            except subprocess.TimeoutExpired:  # its hand-back hangs (an unreachable catalog)
                p.kill()
                p.wait()
        for task in queue.tasks(job):  # a listing carries lease ids only from the database itself
            if task.state == DOING and task.owner in names and task.lease:
                queue.release(job, task.index, task.lease)
        raise
    state = queue.get_job(job)
    if not (state.done or state.failed):
        codes = ", ".join(f"{name}={p.returncode}" for name, p in zip(names, procs, strict=True))
        raise StorageError(
            f"pack job {job}: every worker exited before the job finished ({codes}); "
            "rerun the same command to resume (DONE shards are kept)",
            job=job,
        )
