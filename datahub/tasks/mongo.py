"""Task queue in the catalog's MongoDB database (collections ``datahub_tasks`` and
``datahub_task_jobs``); pymongo is imported here only.

A claim is one ``find_one_and_update`` whose filter accepts TODO or lease-expired DOING
tasks: the server applies it to a single document atomically, so two racing workers
cannot both win. Writes use majority write concern where the client is a real server.
Renew, complete, fail and release match the task's ``lease`` id and ``holder`` in the same
filter (``datahub.tasks.base``); a document from before those fields matches no lease.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pymongo
from pymongo.errors import BulkWriteError, DuplicateKeyError, PyMongoError

from datahub.errors import Conflict, StorageError, job_not_found
from datahub.mongo_client import ProcessClient, connect
from datahub.procs import PerProcess
from datahub.tasks.base import (
    DOING,
    DONE,
    FAILED,
    TODO,
    Clock,
    Job,
    LeaseLost,
    Task,
    TaskQueue,
    check_job_json,
    check_task_json,
    joined_meta,
    lease_lost,
    new_lease,
)


class MongoTaskQueue(TaskQueue):
    def __init__(self, database: Any, clock: Clock = time.time, client: Any = None, *, url: str = "") -> None:
        """``database`` is a pymongo (or mongomock) Database; ``client`` (its client) is closed
        on close(). ``url``: what a forked child connects to (``open_mongo_queue``); without
        it a child copies the client's settings. The client is per process (fork28,
        ``datahub.mongo_client.ProcessClient``): a child never uses or closes its parent's."""
        self.clock = clock
        self._mongo = ProcessClient(
            url, client if client is not None else database.client, closes_given=client is not None
        )
        self._database, self._database_pid = database, os.getpid()  # the given one, in its process
        self._collections: PerProcess[tuple[Any, Any]] = PerProcess(self._open_collections)
        with _translated("create indexes"):
            self._tasks.create_index([("job", pymongo.ASCENDING), ("state", pymongo.ASCENDING), ("idx", 1)])
            self._tasks.create_index([("job", pymongo.ASCENDING), ("idx", pymongo.ASCENDING)], unique=True)

    def _open_collections(self) -> tuple[Any, Any]:
        """(tasks, jobs) on this process's client."""
        client = self._mongo.get()  # made (or taken) here, so that ``close`` closes it
        if os.getpid() == self._database_pid:
            database = self._database
        else:
            database = client.get_database(self._database.name)
        return database["datahub_tasks"], database["datahub_task_jobs"]

    @property
    def _tasks(self) -> Any:
        return self._collections.get()[0]

    @property
    def _jobs(self) -> Any:
        return self._collections.get()[1]

    def create_job(self, job: str, payloads: Sequence[Mapping[str, Any]], meta: Mapping[str, Any]) -> Job:
        check_job_json(job, payloads, meta)  # what MongoDB cannot hold, refused on every store
        now = self.clock()
        with _translated(f"create job {job}"):
            existing = self._jobs.find_one({"_id": job})
            if existing is not None and existing["total"] != len(payloads):
                raise Conflict(
                    f"job {job} already exists with {existing['total']} tasks, not {len(payloads)}; "
                    "delete it first if its input really changed",
                    job=job,
                )
            recorded = existing["meta"] if existing is not None else None
            meta = joined_meta(job, recorded, meta)  # Conflict for another version's epoch
            # tasks first, the job document last: a job document means all its tasks exist
            docs = [{"_id": f"{job}:{i:08d}", **_new_task(job, i, p, now)} for i, p in enumerate(payloads)]
            for start in range(
                0, len(docs) if existing is None else 0, 1000
            ):  # bounded batches, one round trip each
                try:
                    self._tasks.insert_many(docs[start : start + 1000], ordered=False)
                except BulkWriteError as exc:  # a concurrent or earlier creator inserted some: same tasks
                    if any(e.get("code") != 11000 for e in exc.details.get("writeErrors", [])):
                        raise
            self._record_job(job, recorded, meta, len(payloads), now)
        return self.get_job(job)

    def _record_job(
        self, job: str, recorded: Mapping[str, Any] | None, meta: dict[str, Any], total: int, now: float
    ) -> None:
        """Write the job document only while it still records the version ``joined_meta`` checked
        (none, or the same): a creator of another version's epoch in between is a Conflict here,
        never a replaced version over the other's tasks."""
        if recorded is not None:
            found = self._jobs.update_one(
                {"_id": job, "meta.version": recorded.get("version")}, {"$set": {"meta": meta}}
            )
            if found.matched_count == 0:
                joined_meta(job, self._jobs.find_one({"_id": job})["meta"], meta)
            return
        version = meta.get("version")
        try:
            self._jobs.update_one(
                {"_id": job, "meta.version": {"$in": [version, None]}},
                {"$set": {"meta": meta}, "$setOnInsert": {"total": total, "created_at": now}},
                upsert=True,
            )
        except DuplicateKeyError:  # made meanwhile, naming another version
            joined_meta(job, self._jobs.find_one({"_id": job})["meta"], meta)
            raise

    def get_job(self, job: str) -> Job:
        with _translated(f"read job {job}"):
            doc = self._jobs.find_one({"_id": job})
            if doc is None:
                raise job_not_found(job)  # which kind it was to be, the caller knows
            counts: dict[str, int] = {}
            for row in self._tasks.aggregate(
                [{"$match": {"job": job}}, {"$group": {"_id": "$state", "n": {"$sum": 1}}}]
            ):
                counts[row["_id"]] = row["n"]
        return Job(job, doc["meta"], doc["total"], counts, doc["created_at"])

    def delete_job(self, job: str) -> None:
        with _translated(f"delete job {job}"):
            self._jobs.delete_one({"_id": job})
            self._tasks.delete_many({"job": job})

    def claim(
        self, job: str, worker: str, lease_seconds: float, *, holder: str = "", claim_id: str = ""
    ) -> Task | None:
        now = self.clock()
        with _translated(f"claim a task of job {job}"):
            if claim_id:  # a retry of a claim made already, whose answer was lost: the same task
                doc = self._tasks.find_one_and_update(
                    {"job": job, "state": DOING, "claim": claim_id, "holder": holder},
                    {"$set": {"lease_until": now + lease_seconds}},
                    return_document=pymongo.ReturnDocument.AFTER,
                )
                if doc is not None:
                    return _task(doc)
            for state_filter in ({"state": TODO}, {"state": DOING, "lease_until": {"$lte": now}}):
                doc = self._tasks.find_one_and_update(
                    {"job": job, **state_filter},
                    {
                        "$set": {
                            "state": DOING,
                            "owner": worker,
                            "lease_until": now + lease_seconds,
                            "lease": new_lease(),
                            "holder": holder,
                            "claim": claim_id,
                        },
                        "$inc": {"attempts": 1},
                    },
                    sort=[("idx", pymongo.ASCENDING)],
                    return_document=pymongo.ReturnDocument.AFTER,
                )
                if doc is not None:
                    return _task(doc)
        return None

    def _owned_update(self, job: str, index: int, lease: str, holder: str, sets: dict[str, Any]) -> Task:
        """Apply ``sets`` only while ``lease`` of ``holder`` holds the task (one atomic update)."""
        if not lease:  # documents from before leases had none: an empty id must never match them
            raise lease_lost(job, index)
        with _translated(f"update task {index} of job {job}"):
            doc = self._tasks.find_one_and_update(
                {"job": job, "idx": index, "state": DOING, "lease": lease, "holder": holder},
                {"$set": sets},
                return_document=pymongo.ReturnDocument.AFTER,
            )
        if doc is None:
            raise lease_lost(job, index)
        return _task(doc)

    def renew(self, job: str, index: int, lease: str, lease_seconds: float, *, holder: str = "") -> Task:
        return self._owned_update(job, index, lease, holder, {"lease_until": self.clock() + lease_seconds})

    def complete(
        self, job: str, index: int, lease: str, result: Mapping[str, Any], *, holder: str = ""
    ) -> Task:
        check_task_json(job, f"the result of task {index}", result)
        sets = {"state": DONE, "result": dict(result), "lease_until": 0, "lease": ""}
        return self._owned_update(job, index, lease, holder, sets)

    def fail(self, job: str, index: int, lease: str, error: str, *, holder: str = "") -> Task:
        sets = {"state": FAILED, "error": error, "lease_until": 0, "lease": ""}
        return self._owned_update(job, index, lease, holder, sets)

    def release(self, job: str, index: int, lease: str, *, holder: str = "") -> None:
        try:
            sets = {"state": TODO, "owner": "", "lease_until": 0, "lease": "", "holder": ""}
            self._owned_update(job, index, lease, holder, sets)
        except LeaseLost:
            pass

    def retry_failed(self, job: str) -> int:
        with _translated(f"retry failed tasks of job {job}"):
            res = self._tasks.update_many(
                {"job": job, "state": FAILED},
                {"$set": {"state": TODO, "owner": "", "error": "", "lease": "", "holder": ""}},
            )
        return res.modified_count

    def tasks(self, job: str) -> Iterator[Task]:
        with _translated(f"list tasks of job {job}"):
            docs = list(self._tasks.find({"job": job}).sort("idx", pymongo.ASCENDING))
        return iter([_task(d) for d in docs])

    def close(self) -> None:
        """Close this process's client if the queue was given it or made it; never a parent's."""
        self._collections.drop()
        self._mongo.close()


def open_mongo_queue(url: str, clock: Clock = time.time) -> MongoTaskQueue:
    """``mongodb://host/db`` -> a queue in that database (majority writes, retryable)."""
    client, db_name = connect(url)
    return MongoTaskQueue(client.get_database(db_name), clock, client=client, url=url)


def _new_task(job: str, index: int, payload: Mapping[str, Any], now: float) -> dict[str, Any]:
    return {
        "job": job,
        "idx": index,
        "state": TODO,
        "payload": dict(payload),
        "owner": "",
        "lease_until": 0.0,
        "attempts": 0,
        "result": {},
        "error": "",
        "lease": "",
        "holder": "",
        "created_at": now,
    }


def _task(doc: Mapping[str, Any]) -> Task:
    return Task(
        doc["job"],
        doc["idx"],
        doc["state"],
        doc["payload"],
        doc["owner"],
        doc["lease_until"],
        doc["attempts"],
        doc.get("result") or {},
        doc.get("error", ""),
        doc.get("lease", ""),
    )


class _translated:
    """Turn pymongo failures into StorageError once, naming the operation."""

    def __init__(self, what: str) -> None:
        self.what = what

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type | None, exc: BaseException | None, tb: object) -> bool:
        if exc is not None and isinstance(exc, PyMongoError):
            raise StorageError(f"task queue: {self.what} failed in MongoDB: {exc}") from exc
        return False
