"""One conformance suite for every TaskQueue (SQLite file, MongoDB via mongomock, and the HTTP
queue of a real API server)."""

from __future__ import annotations

import multiprocessing
import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import mongomock
import pytest

from datahub.errors import Conflict
from datahub.tasks import DOING, DONE, FAILED, TODO, JobNotFound, LeaseLost, TaskQueue, open_task_queue
from datahub.tasks.http import HttpTaskQueue
from datahub.tasks.mongo import MongoTaskQueue
from datahub.tasks.sqlite import SqliteTaskQueue
from tests.tasks.racer import race


class FakeClock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


MONGO_URI = os.environ.get("DATAHUB_TEST_MONGO_URI", "")  # add a real mongod, as tests/catalog does


@pytest.fixture(scope="module")
def shared_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """The module's API server for its ``http`` queues (tests/catalog/remote.py, SharedServer):
    each test still gets a fresh queue, catalog and token of its own behind it."""
    from tests.catalog.remote import SharedServer

    server = SharedServer(tmp_path_factory.mktemp("api"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=["sqlite", "mongomock", "http"] + (["mongo"] if MONGO_URI else []))
def queue(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Iterator[TaskQueue]:
    if request.param == "sqlite":
        q: TaskQueue = SqliteTaskQueue(tmp_path / "catalog.db", clock)
    elif request.param == "http":  # HttpTaskQueue -> a real `datahub serve` holding a SQLite queue
        shared = request.getfixturevalue("shared_api")  # one server per module, the queue the test's
        served = SqliteTaskQueue(tmp_path / "tasks.db", clock)
        backing, token, services = shared.serve(tmp_path, tasks=served)
        q = HttpTaskQueue(shared.server.url, token=token)

        def stop() -> None:
            services.close()
            backing.close()
            served.close()

        request.addfinalizer(stop)
    elif request.param == "mongomock":
        q = MongoTaskQueue(mongomock.MongoClient().get_database("catalog"), clock)
    else:
        import pymongo

        client = pymongo.MongoClient(MONGO_URI)
        name = f"datahub_tasks_{uuid.uuid4().hex[:10]}"
        q = MongoTaskQueue(client[name], clock, client=client)
        request.addfinalizer(lambda: pymongo.MongoClient(MONGO_URI).drop_database(name))
    yield q
    q.close()


def _payloads(n: int) -> list[dict]:
    return [{"first": f"k{i:03d}", "n": i} for i in range(n)]


def test_tasks_move_todo_doing_done(queue: TaskQueue) -> None:
    job = queue.create_job("j1", _payloads(3), {"kind": "test"})
    assert (job.total, dict(job.counts), job.done) == (3, {TODO: 3}, False)
    t0 = queue.claim("j1", "w1", 30)
    assert (t0.index, t0.state, t0.owner, t0.payload, t0.attempts) == (0, DOING, "w1", _payloads(3)[0], 1)
    t1 = queue.claim("j1", "w2", 30)
    assert t1.index == 1
    assert t0.lease and t1.lease and t0.lease != t1.lease
    queue.complete("j1", 0, t0.lease, {"shard": "a"})
    queue.complete("j1", 1, t1.lease, {"shard": "b"})
    t2 = queue.claim("j1", "w1", 30)
    queue.complete("j1", 2, t2.lease, {"shard": "c"})
    assert t2.index == 2
    assert queue.claim("j1", "w1", 30) is None
    job = queue.get_job("j1")
    assert job.done and dict(job.counts) == {DONE: 3}
    assert [t.result["shard"] for t in queue.tasks("j1")] == ["a", "b", "c"]


def test_expired_lease_is_stolen_and_late_owner_loses(queue: TaskQueue, clock: FakeClock) -> None:
    queue.create_job("j", _payloads(1), {})
    slow = queue.claim("j", "slow", 10)
    assert slow.index == 0
    clock.now += 9.9
    assert queue.claim("j", "fast", 10) is None  # lease still valid
    clock.now += 0.2
    stolen = queue.claim("j", "fast", 10)
    assert (stolen.index, stolen.owner, stolen.attempts) == (0, "fast", 2)
    assert stolen.lease != slow.lease  # a steal draws a new lease id: the late owner's is void
    with pytest.raises(LeaseLost, match="task 0 of job j"):
        queue.complete("j", 0, slow.lease, {"late": True})
    with pytest.raises(LeaseLost):
        queue.renew("j", 0, slow.lease, 10)
    queue.release("j", 0, slow.lease)  # the late owner leaving gives back nothing it lost
    queue.complete("j", 0, stolen.lease, {"ok": True})
    assert next(queue.tasks("j")).result == {"ok": True}


def test_renew_keeps_the_lease(queue: TaskQueue, clock: FakeClock) -> None:
    queue.create_job("j", _payloads(1), {})
    held = queue.claim("j", "w", 10)
    for _ in range(5):
        clock.now += 8
        queue.renew("j", 0, held.lease, 10)
        assert queue.claim("j", "thief", 10) is None


def test_release_and_fail_and_retry(queue: TaskQueue) -> None:
    queue.create_job("j", _payloads(2), {})
    held = queue.claim("j", "w", 10)
    queue.release("j", 0, held.lease)
    again = queue.claim("j", "v", 10)
    assert (again.index, again.owner) == (0, "v")
    queue.fail("j", 0, again.lease, "corrupt image a.jpg")
    job = queue.get_job("j")
    assert job.failed and job.counts[FAILED] == 1
    assert queue.claim("j", "v", 10).index == 1  # a FAILED task is never handed out again
    assert queue.retry_failed("j") == 1
    assert queue.claim("j", "v", 10).index == 0


def test_a_worker_name_is_no_lease(queue: TaskQueue) -> None:
    """audit11: naming the worker that claimed a task (its label) renews, finishes, fails or
    releases nothing; only the lease id the claim returned does."""
    queue.create_job("j", _payloads(1), {})
    held = queue.claim("j", "host-a:1", 10)
    for proof in ("host-a:1", "", held.lease + "x"):
        with pytest.raises(LeaseLost):
            queue.complete("j", 0, proof, {"forged": True})
        with pytest.raises(LeaseLost):
            queue.fail("j", 0, proof, "stalled")
        with pytest.raises(LeaseLost):
            queue.renew("j", 0, proof, 10)
        queue.release("j", 0, proof)
    assert next(queue.tasks("j")).state == DOING
    assert queue.complete("j", 0, held.lease, {"ok": True}).state == DONE


def test_a_lease_acts_only_for_its_holder(queue: TaskQueue) -> None:
    """The holder a claim recorded (the server's authenticated principal) must come with the lease."""
    if isinstance(queue, HttpTaskQueue):
        pytest.skip("over HTTP the server names the holder (tests/tasks/test_http_queue.py)")
    queue.create_job("j", _payloads(1), {})
    held = queue.claim("j", "w", 10, holder="node-a")
    with pytest.raises(LeaseLost):
        queue.complete("j", 0, held.lease, {"forged": True}, holder="node-b")
    with pytest.raises(LeaseLost):
        queue.renew("j", 0, held.lease, 10)  # holder "" (local mode) is a holder too
    queue.release("j", 0, held.lease, holder="node-b")
    assert queue.renew("j", 0, held.lease, 10, holder="node-a").state == DOING
    queue.release("j", 0, held.lease, holder="node-a")
    assert next(queue.tasks("j")).state == TODO


def test_create_job_is_idempotent_and_keeps_done_work(queue: TaskQueue) -> None:
    queue.create_job("j", _payloads(2), {"v": 1})
    held = queue.claim("j", "w", 10)
    queue.complete("j", 0, held.lease, {"r": 1})
    job = queue.create_job("j", _payloads(2), {"v": 2})
    assert job.meta == {"v": 2} and job.counts[DONE] == 1
    with pytest.raises(Conflict, match="already exists with 2 tasks"):
        queue.create_job("j", _payloads(3), {})


def test_unknown_job(queue: TaskQueue) -> None:
    with pytest.raises(JobNotFound, match="nope"):
        queue.get_job("nope")
    assert queue.claim("nope", "w", 10) is None
    queue.delete_job("nope")


def test_delete_job(queue: TaskQueue) -> None:
    queue.create_job("j", _payloads(2), {})
    queue.delete_job("j")
    with pytest.raises(JobNotFound):
        queue.get_job("j")
    assert list(queue.tasks("j")) == []


def test_threads_racing_each_task_has_exactly_one_winner(queue: TaskQueue) -> None:
    if isinstance(queue, MongoTaskQueue) and "mongomock" in type(queue._tasks).__module__:
        # mongomock applies find_one_and_update without a server-side lock, so a race
        # against it tests mongomock; a real mongod makes the single-document update atomic.
        pytest.skip("mongomock is not a concurrent server; set DATAHUB_TEST_MONGO_URI to race a real mongod")
    queue.create_job("race", _payloads(40), {})
    won: dict[str, list[int]] = {}
    start = threading.Barrier(8)

    def worker(name: str) -> None:
        start.wait()
        got = won.setdefault(name, [])
        while (task := queue.claim("race", name, 60)) is not None:
            got.append(task.index)

    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    claimed = sorted(i for got in won.values() for i in got)
    assert claimed == list(range(40))  # every task once, none twice
    assert dict(queue.get_job("race").counts) == {DOING: 40}


@pytest.mark.parametrize("tasks", [1, 25])
def test_processes_racing_for_tasks_each_has_exactly_one_winner(tmp_path: Path, tasks: int) -> None:
    path = str(tmp_path / "catalog.db")
    queue = SqliteTaskQueue(path)
    queue.create_job("race", _payloads(tasks), {})
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=race, args=(path, "race", f"p{i}", barrier, out)) for i in range(4)]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    claimed = sorted(i for got in results.values() for i in got)
    assert claimed == list(range(tasks))  # every task claimed once, none twice
    assert len({t.owner for t in queue.tasks("race")}) == min(
        tasks, len({n for n, g in results.items() if g})
    )
    if tasks == 1:
        assert sum(1 for got in results.values() if got) == 1  # four racers, one winner
    queue.close()


def test_open_task_queue_uses_the_catalog_sqlite_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cat.db'}"
    q = open_task_queue(url)
    q.create_job("j", _payloads(1), {})
    q.close()
    assert (tmp_path / "cat.db").exists()
    with pytest.raises(Exception, match="no task queue"):
        open_task_queue("redis://x")


def test_a_queue_file_from_before_leases_gains_them_and_its_held_tasks_expire(
    tmp_path: Path, clock: FakeClock
) -> None:
    """A DOING row written before lease ids existed matches no lease (an empty id included),
    and comes back when its lease expires, as a dead worker's would."""
    import sqlite3

    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript(
        """CREATE TABLE datahub_task_jobs (job TEXT PRIMARY KEY, meta TEXT NOT NULL, total INTEGER NOT NULL,
               created_at REAL NOT NULL);
           CREATE TABLE datahub_tasks (job TEXT NOT NULL, idx INTEGER NOT NULL, state TEXT NOT NULL,
               payload TEXT NOT NULL, owner TEXT NOT NULL DEFAULT '', lease_until REAL NOT NULL DEFAULT 0,
               attempts INTEGER NOT NULL DEFAULT 0, result TEXT NOT NULL DEFAULT '{}',
               error TEXT NOT NULL DEFAULT '', updated_at REAL NOT NULL, PRIMARY KEY (job, idx));
           INSERT INTO datahub_task_jobs VALUES ('j', '{}', 1, 0);"""
    )
    db.execute(
        "INSERT INTO datahub_tasks VALUES ('j', 0, 'DOING', '{}', 'old:1', ?, 1, '{}', '', 0)",
        (clock.now + 10,),
    )
    db.commit()
    db.close()
    queue = SqliteTaskQueue(path, clock)
    try:
        with pytest.raises(LeaseLost):
            queue.complete("j", 0, "", {"forged": True})
        with pytest.raises(LeaseLost):
            queue.complete("j", 0, "old:1", {"forged": True})
        assert queue.claim("j", "new", 10) is None
        clock.now += 11
        taken = queue.claim("j", "new", 10)
        assert (taken.index, taken.attempts) == (0, 2) and taken.lease
        assert queue.complete("j", 0, taken.lease, {"ok": True}).state == DONE
    finally:
        queue.close()
