"""A pack job's finalize commits only shards the job itself uploaded.

Workers report each task's shard (URL, etag, size, checksum) to the task queue, and the
finalize turns those reports into the target's records. A remote worker reports through
``/v1/tasks/jobs/{job}/tasks/{i}/complete`` with any token that may write the target, and
when the job's finalize runs under a global admin (``datahub pack`` on the server, with the
catalog's own URL), the commit is the admin's: a writer's report of ``file:///…`` (the
server's disk) or of an object the job never made became a record that only a global admin
may commit over HTTP (docs/api.md), read by every reader of the target through the server's
or its node's cache. So a report must name this job's shard of that task (the name the
worker's upload gives it, ``packs/<job>/shard-<task>-<sha256 prefix>.lmdb``) and the object
must be there with the reported etag and size; otherwise nothing is committed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from datahub.catalog import Catalog
from datahub.config import Config
from datahub.errors import InvalidInput
from datahub.pack import PackSpec, finalize, pack, start_job, work
from datahub.pack.job import objects_dir
from datahub.pack.worker import PackServices
from datahub.storage import StoreRegistry
from datahub.tasks import open_task_queue
from tests.api.conftest import api_for
from tests.pack.conftest import import_manifest, write_source


def _job_with_a_forged_task(config: Config, catalog: Catalog, tmp_path: Path, forge) -> tuple[str, str]:
    """Pack 4 photos in 2 tasks: task 0 by a real worker, task 1 completed over HTTP by bob
    (writer on the target, no admin) with ``forge(real result of task 0)``."""
    import_manifest(catalog, config, write_source(tmp_path / "src", 4), "photos")
    catalog.update_dataset("photos", acl={"bob": "reader"})
    spec = PackSpec.parse(resize="shorter=40", shard_size="30KiB")  # 2 photos per task
    queue = open_task_queue(config.resolved_catalog_url)
    try:
        job = start_job(catalog, queue, "photos", "packed", spec)
        assert job.total == 2
        catalog.update_dataset("packed", acl={"bob": "writer"})
        services = PackServices.open(config)
        try:
            work(services, job.job, stop=_after_one_task(services.queue))
        finally:
            services.close()
        done = next(t for t in queue.tasks(job.job) if t.state == "DONE")
    finally:
        queue.close()
    with api_for(config) as api:
        base = f"/v1/tasks/jobs/{job.job}"
        claimed = api.post(f"{base}/claim", "bob", json={"worker": "bob/1", "lease_seconds": 60})
        assert claimed.status_code == 200, claimed.text
        index = claimed.json()["task"]["index"]
        forged = forge(dict(done.result), index)
        answer = api.post(
            f"{base}/tasks/{index}/complete",
            "bob",
            json={"lease": claimed.json()["task"]["lease"], "result": forged},
        )
        assert answer.status_code == 200, answer.text
    return job.job, forged["url"]


def _after_one_task(queue):
    """A stop event that is set once the worker completes a task (it leaves the rest)."""
    import threading

    stop = threading.Event()
    original = queue.complete

    def complete(*args, **kwargs):
        task = original(*args, **kwargs)
        stop.set()
        return task

    queue.complete = complete
    return stop


def _file_url(tmp_path: Path) -> object:
    secret = tmp_path / "server-only.txt"
    secret.write_bytes(b"the server's own file, which no reader of 'packed' may read\n")

    def forge(real: dict, index: int) -> dict:
        return {**real, "url": secret.as_uri(), "etag": "any", "size": secret.stat().st_size}

    return forge


def _another_tasks_shard(real: dict, index: int) -> dict:
    return dict(real)  # the real shard of the other task: not this task's


def _wrong_size(real: dict, index: int) -> dict:
    url = real["url"].replace("shard-00000-", f"shard-{index:05d}-")
    return {**real, "url": url}  # this task's name, but no such object was uploaded


@pytest.mark.parametrize("forgery", ["file_url", "another_tasks_shard", "not_uploaded"])
def test_the_finalize_refuses_a_shard_the_job_did_not_upload(
    config: Config, tmp_path: Path, forgery: str
) -> None:
    forge = {"file_url": _file_url(tmp_path), "another_tasks_shard": _another_tasks_shard,
             "not_uploaded": _wrong_size}[forgery]  # fmt: skip
    config.home_path.mkdir(parents=True, exist_ok=True)
    from datahub.catalog import open_catalog

    catalog = open_catalog(config.resolved_catalog_url)
    try:
        job, url = _job_with_a_forged_task(config, catalog, tmp_path, forge)
        queue = open_task_queue(config.resolved_catalog_url)
        try:
            with StoreRegistry(config) as stores, pytest.raises(InvalidInput) as refused:
                objects = stores.store(config.resolved_objects_url)
                finalize(catalog, queue, objects, job, stores=stores, author="root")
        finally:
            queue.close()
        message = refused.value.message
        assert url in message and "bob/1" in message and "Nothing was committed" in message
        assert catalog.store.head("packed") == 0  # no version names the forged object
        # what the message says to do: pack again from scratch, every task by real workers
        spec = PackSpec.parse(resize="shorter=40", shard_size="30KiB")
        result = pack(config, catalog, "photos", "packed", spec, workers=0, restart=True)
        assert result.job == job and result.samples == 4
        urls = [r.url for r in catalog.list_records("packed", None, prefix="shards/")]
        queue = open_task_queue(config.resolved_catalog_url)
        folder = objects_dir(job, queue.get_job(job).meta)  # the restarted job's own folder
        queue.close()
        assert [u.split(f"/packs/{folder}/")[1][:11] for u in urls] == ["shard-00000", "shard-00001"]

    finally:
        catalog.close()
