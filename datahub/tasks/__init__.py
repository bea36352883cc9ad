"""A durable task queue with leases, living in the catalog's own database.

``open_task_queue(catalog_url)`` picks the implementation from the catalog URL, so a job
is stored next to the catalog it writes to: ``sqlite:///path.db`` -> the same file,
``mongodb://host/db`` -> the same database, ``http(s)://host:port`` -> the queue of that
datahub API server (``datahub.tasks.http``). (``mongomock://`` catalogs are per-process
test doubles; tests build ``MongoTaskQueue`` from a mongomock database directly.)
"""

from __future__ import annotations

import time
from urllib.parse import unquote, urlsplit

from datahub.errors import InvalidInput
from datahub.tasks.base import (
    DOING,
    DONE,
    FAILED,
    STATES,
    TODO,
    Clock,
    Job,
    JobNotFound,
    LeaseLost,
    Task,
    TaskQueue,
)

__all__ = [
    "DOING",
    "DONE",
    "FAILED",
    "STATES",
    "TODO",
    "Job",
    "JobNotFound",
    "LeaseLost",
    "Task",
    "TaskQueue",
    "open_task_queue",
]


def open_task_queue(catalog_url: str, clock: Clock = time.time) -> TaskQueue:
    """The task queue stored in the database behind ``catalog_url``."""
    scheme = urlsplit(catalog_url).scheme
    if scheme == "sqlite":
        from datahub.tasks.sqlite import SqliteTaskQueue

        path = unquote(catalog_url[len("sqlite://") :])
        if not path.startswith("/"):
            raise InvalidInput(f"invalid catalog URL {catalog_url!r}: use sqlite:///absolute/path.db")
        return SqliteTaskQueue(path, clock)
    if scheme in ("mongodb", "mongodb+srv"):
        from datahub.tasks.mongo import open_mongo_queue

        return open_mongo_queue(catalog_url, clock)
    if scheme in ("http", "https"):
        from datahub.tasks.http import HttpTaskQueue

        return HttpTaskQueue(catalog_url)  # the server's queue; leases on the server's clock
    raise InvalidInput(
        f"no task queue for catalog URL {catalog_url!r}: use sqlite:///path.db, mongodb://host/db "
        "or http(s)://datahub-api:port"
    )
