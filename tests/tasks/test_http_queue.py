"""The task queue over HTTP: URL dispatch and who may do what (a real API server on 127.0.0.1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from datahub.api.tokens import issue_token
from datahub.errors import AccessDenied, CatalogUnavailable, JobNotFound, Unauthenticated
from datahub.tasks import open_task_queue
from datahub.tasks.http import HttpTaskQueue
from tests.catalog.remote import serve


def test_workers_use_the_servers_queue_and_only_admins_manage_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, backing, admin = serve(tmp_path)  # the server opens the queue of its own catalog URL
    try:
        worker_token = issue_token(backing.store, "node-7")[0]
        monkeypatch.setenv("DATAHUB_API_TOKEN", admin)
        boss = open_task_queue(server.url)
        assert isinstance(boss, HttpTaskQueue)
        boss.create_job("pack-1", [{"n": 0}, {"n": 1}], {"dataset": "pets"})
        worker = HttpTaskQueue(server.url, token=worker_token)
        task = worker.claim("pack-1", "node-7/1", 30)
        assert task is not None and task.payload == {"n": 0}
        worker.complete("pack-1", task.index, "node-7/1", {"shard": "s0"})
        assert dict(worker.get_job("pack-1").counts) == {"DONE": 1, "TODO": 1}
        with pytest.raises(AccessDenied, match="admin"):
            worker.create_job("pack-2", [{}], {})
        with pytest.raises(AccessDenied):
            worker.delete_job("pack-1")
        with pytest.raises(JobNotFound, match="'nope'"):
            worker.get_job("nope")
        with pytest.raises(Unauthenticated):
            HttpTaskQueue(server.url, token="wrong").get_job("pack-1")
        worker.close()
        boss.close()
    finally:
        server.stop()
        backing.close()
    with pytest.raises(CatalogUnavailable, match=server.url):
        HttpTaskQueue(server.url, token=admin, attempts=2, backoff=0.01).get_job("pack-1")
