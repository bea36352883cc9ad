"""The TaskQueue of a remote datahub API server: ``open_task_queue("http(s)://host:port")``.

Why: a pack worker on a node then needs only an API token (``$DATAHUB_API_TOKEN``); the
server holds the real queue next to its catalog (``/v1/tasks/jobs``). Retries and errors
follow ``datahub.api_client``. Leases are measured on the server's clock (the ``clock`` of
this object is not used), so workers on hosts with skewed clocks still agree. The server
records the token's principal as each lease's holder (``holder`` here is ignored: the caller's
word is not proof), and only the claim's answer carries the lease id; listings never do.

A retried call after a lost answer is safe for reads, create (idempotent), renew, release and
claim (each claim sends a claim id, the same on every retry, and the server answers a repeated
id with the task it claimed under it: before review44 the retry took another task and the
first stayed leased to nobody until its lease expired, stalling the epoch's end); a repeated
``complete``/``fail`` of a task the first attempt already finished answers LeaseLost.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import quote

from datahub.api_client import ApiClient
from datahub.tasks.base import Job, Task, TaskQueue, check_job_json, check_task_json, new_claim_id


class HttpTaskQueue(TaskQueue):
    def __init__(self, url: str, token: str | None = None, **options: Any) -> None:
        """``options``: timeout, connect_timeout, attempts, backoff, budget (see ApiClient)."""
        self._api = ApiClient(url, token, **options)
        self.url = self._api.url

    def __repr__(self) -> str:
        return f"HttpTaskQueue({self.url!r})"  # never the token

    def _path(self, job: str, *rest: str) -> str:
        return "/".join([f"/v1/tasks/jobs/{quote(job, safe='')}", *rest])

    def create_job(self, job: str, payloads: Sequence[Mapping[str, Any]], meta: Mapping[str, Any]) -> Job:
        check_job_json(job, payloads, meta)  # the server's rule, before httpx fails on a surrogate
        what = f"create task job {job!r}"
        body = {"payloads": [dict(p) for p in payloads], "meta": dict(meta)}
        return self._api.decode(what, _job, self._api.json("PUT", self._path(job), what=what, json=body))

    def get_job(self, job: str) -> Job:
        what = f"task job {job!r}"
        return self._api.decode(what, _job, self._api.json("GET", self._path(job), what=what))

    def claim(
        self, job: str, worker: str, lease_seconds: float, *, holder: str = "", claim_id: str = ""
    ) -> Task | None:
        """``claim_id``: made here when not given, and sent again by each retry of this call, so
        a retry after a lost answer gets the task the server claimed (``TaskQueue.claim``)."""
        what = f"claim a task of job {job!r}"
        body = {"worker": worker, "lease_seconds": lease_seconds, "claim_id": claim_id or new_claim_id()}
        answer = self._api.json("POST", self._path(job, "claim"), what=what, json=body)
        return self._api.decode(what, lambda a: _task(a["task"]) if a["task"] is not None else None, answer)

    def renew(self, job: str, index: int, lease: str, lease_seconds: float, *, holder: str = "") -> Task:
        return self._task_call(job, index, "renew", {"lease": lease, "lease_seconds": lease_seconds})

    def complete(
        self, job: str, index: int, lease: str, result: Mapping[str, Any], *, holder: str = ""
    ) -> Task:
        check_task_json(job, f"the result of task {index}", result)  # as the server's store does
        return self._task_call(job, index, "complete", {"lease": lease, "result": dict(result)})

    def fail(self, job: str, index: int, lease: str, error: str, *, holder: str = "") -> Task:
        return self._task_call(job, index, "fail", {"lease": lease, "error": error})

    def release(self, job: str, index: int, lease: str, *, holder: str = "") -> None:
        what = f"release task {index} of job {job!r}"
        self._api.json(
            "POST", self._path(job, "tasks", str(index), "release"), what=what, json={"lease": lease}
        )

    def retry_failed(self, job: str) -> int:
        what = f"retry the failed tasks of job {job!r}"
        answer = self._api.json("POST", self._path(job, "retry-failed"), what=what)
        return self._api.decode(what, lambda a: int(a["count"]), answer)

    def tasks(self, job: str) -> Iterator[Task]:
        what = f"the tasks of job {job!r}"
        for obj in self._api.lines(self._path(job, "tasks"), what=what, params={}):
            yield self._api.decode(what, _task, obj)

    def delete_job(self, job: str) -> None:
        self._api.json("DELETE", self._path(job), what=f"delete task job {job!r}")

    def close(self) -> None:
        self._api.close()

    def _task_call(self, job: str, index: int, action: str, body: dict[str, Any]) -> Task:
        what = f"{action} task {index} of job {job!r}"
        answer = self._api.json("POST", self._path(job, "tasks", str(index), action), what=what, json=body)
        return self._api.decode(what, _task, answer)


def _job(j: Mapping[str, Any]) -> Job:
    return Job(j["job"], j["meta"], j["total"], j["counts"], j["created_at"])


def _task(t: Mapping[str, Any]) -> Task:
    return Task(
        t["job"],
        t["index"],
        t["state"],
        t["payload"],
        t["owner"],
        t["lease_until"],
        t["attempts"],
        t["result"],
        t["error"],
        t.get("lease", ""),
    )
