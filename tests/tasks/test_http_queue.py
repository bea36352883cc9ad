"""The task queue over HTTP: URL dispatch and who may do what (a real API server on 127.0.0.1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from datahub.api.tokens import issue_token
from datahub.errors import AccessDenied, CatalogUnavailable, JobNotFound, LeaseLost, Unauthenticated
from datahub.tasks import open_task_queue
from datahub.tasks.http import HttpTaskQueue
from tests.catalog.remote import serve


def test_workers_use_the_servers_queue_and_only_admins_manage_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, backing, admin = serve(tmp_path)  # the server opens the queue of its own catalog URL
    try:
        worker_token = issue_token(backing.store, "node-7")[0]
        backing.create_dataset("pets", acl={"node-7": "reader"})  # a worker reads the job's source
        monkeypatch.setenv("DATAHUB_API_TOKEN", admin)
        boss = open_task_queue(server.url)
        assert isinstance(boss, HttpTaskQueue)
        boss.create_job("pack-1", [{"n": 0}, {"n": 1}], {"source": "pets"})
        worker = HttpTaskQueue(server.url, token=worker_token)
        task = worker.claim("pack-1", "node-7/1", 30)
        assert task is not None and task.payload == {"n": 0}
        worker.complete("pack-1", task.index, task.lease, {"shard": "s0"})
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


def test_a_worker_name_is_no_proof_only_the_claimers_lease_acts_on_its_task(tmp_path: Path) -> None:
    """audit11: token B, allowed to work the job, names token A's worker and so renewed, failed or
    completed A's task (stalling it, or handing back work it never did). The server now binds each
    lease to the claim's random lease id and the token's principal: a name, or A's lease id shown
    to B, moves nothing, and A finishes its own task."""
    server, backing, admin = serve(tmp_path)
    try:
        token_a = issue_token(backing.store, "node-a")[0]
        token_b = issue_token(backing.store, "node-b")[0]
        backing.create_dataset("pets", acl={"*": "reader"})  # both may work the job: the lease decides
        HttpTaskQueue(server.url, token=admin).create_job("pack-1", [{"n": 0}, {"n": 1}], {"source": "pets"})
        a, b = HttpTaskQueue(server.url, token=token_a), HttpTaskQueue(server.url, token=token_b)
        held = a.claim("pack-1", "host-a:101", 30)
        assert held is not None and held.index == 0
        _cannot_touch(b, "host-a:101")  # A's display name
        _cannot_touch(b, held.lease)  # A's own lease id, leaked to B: still not B's lease
        assert held.lease
        listed = list(b.tasks("pack-1"))
        assert (listed[0].state, listed[0].owner) == ("DOING", "host-a:101")
        assert all(t.lease == "" for t in listed)  # a listing never shows a lease id
        mine = b.claim("pack-1", "host-a:101", 30)  # B may call its worker anything: a label
        assert mine is not None and mine.index == 1 and mine.lease != held.lease
        with pytest.raises(LeaseLost):
            a.complete("pack-1", 1, "host-a:101", {"shard": "forged"})
        a.renew("pack-1", 0, held.lease, 30)
        assert a.complete("pack-1", 0, held.lease, {"shard": "s0"}).result == {"shard": "s0"}
        b.complete("pack-1", 1, mine.lease, {"shard": "s1"})
        assert [t.result["shard"] for t in a.tasks("pack-1")] == ["s0", "s1"]
        a.close()
        b.close()
    finally:
        server.stop()
        backing.close()


def _cannot_touch(queue: HttpTaskQueue, proof: str) -> None:
    """``queue`` presenting ``proof`` for task 0 of pack-1 finishes, fails and renews nothing."""
    with pytest.raises(LeaseLost, match="task 0 of job pack-1"):
        queue.complete("pack-1", 0, proof, {"shard": "forged"})
    with pytest.raises(LeaseLost):
        queue.fail("pack-1", 0, proof, "stalled by another token")
    with pytest.raises(LeaseLost):
        queue.renew("pack-1", 0, proof, 30)
    queue.release("pack-1", 0, proof)  # nothing to give back: a no-op, as for a lost lease


def test_an_epoch_is_worked_by_the_readers_of_its_source_only(tmp_path: Path) -> None:
    """sec24: ``shard_epoch`` made a job naming no dataset, and any valid token of the server
    claimed its tasks (TaskStream ran the epoch for eve, who reads nothing). An epoch without
    ``source=`` is now an admin's only; with it, the source's readers stream it."""
    from datahub.torch import TaskStream, shard_epoch

    server, backing, admin = serve(tmp_path)
    try:
        backing.create_dataset("pets", acl={"alice": "reader"})
        tokens = {who: issue_token(backing.store, who)[0] for who in ("alice", "eve")}
        boss = HttpTaskQueue(server.url, token=admin)
        assert shard_epoch(boss, "epoch-1", 3) == "epoch-1"
        assert "source" not in boss.get_job("epoch-1").meta

        def stream(who: str, job: str) -> list[int]:
            opened = lambda: HttpTaskQueue(server.url, token=tokens[who])  # noqa: E731
            return list(TaskStream(opened, job, lambda task: [task.payload["shard"]], poll_seconds=0.01))

        for who in ("alice", "eve"):
            with pytest.raises(AccessDenied, match=r"'epoch-1' names no source dataset.*source=DATASET"):
                stream(who, "epoch-1")
        assert dict(boss.get_job("epoch-1").counts) == {"TODO": 3}
        shard_epoch(boss, "epoch-2", 3, source="pets")
        assert boss.get_job("epoch-2").meta == {"kind": "epoch", "source": "pets"}
        with pytest.raises(JobNotFound):  # eve may not read pets: the job is as missing
            stream("eve", "epoch-2")
        assert sorted(stream("alice", "epoch-2")) == [0, 1, 2]
        assert dict(boss.get_job("epoch-2").counts) == {"DONE": 3}
        boss.close()
    finally:
        server.stop()
        backing.close()
