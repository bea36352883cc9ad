"""Process target for the racing test: kept apart so spawned children import only this."""

from __future__ import annotations

from datahub.tasks.sqlite import SqliteTaskQueue


def race(path: str, job: str, name: str, barrier, out) -> None:
    queue = SqliteTaskQueue(path)
    barrier.wait()
    got = []
    while (task := queue.claim(job, name, 60)) is not None:
        got.append(task.index)
    out.put((name, got))
    queue.close()
