"""fork27: a catalog the PARENT opened, used directly by a forked child.

SQLite forbids using a connection opened before a fork in the child (its locks and WAL-index
state are per process), and even closing one there. A child using the parent's ``Catalog``
(a ``multiprocessing`` worker with the default "fork" start method, a DataLoader worker) took
the parent's pooled connections, and waited for ever for what a parent thread held at the
fork: the pool's connections lent to it, the commit turn. The HTTP catalog client shared the
parent's keep-alive connections: a parent and a child asking at once read each other's
answers. Each is per process now (``datahub.procs.PerProcess``).
"""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
import threading

from datahub.catalog import Catalog
from datahub.catalog.http_store import HttpCatalogStore
from datahub.catalog.model import Put
from datahub.catalog.sqlite_store import SQLiteCatalogStore
from datahub.sqlite_pool import SQLiteConnections
from tests.cache.test_fork25 import in_child
from tests.catalog.conftest import rec
from tests.catalog.remote import serve
from tests.forked import at_once, wrong_answers

ROUNDS = 40


_armed: list[threading.Event] = []


def _release_at_fork() -> None:
    """The test's own before-fork hook (runs before datahub's): lets the held commit go on."""
    for event in _armed:
        event.set()


os.register_at_fork(before=_release_at_fork)


def test_a_child_queries_a_pool_whose_connections_parent_threads_held(tmp_path) -> None:
    """Every connection of the pool is lent to a parent thread when a fork starts (the threads
    are let go at the fork): the fork waits for them, and the child opens its own connection.
    On main the child's first query waited for ever for the parent threads' connections."""
    pool = SQLiteConnections(tmp_path / "db", max_connections=2, max_idle=2)
    with pool.immediate() as conn:
        conn.execute("CREATE TABLE t (v TEXT)")
        conn.execute("INSERT INTO t VALUES ('parent')")
    # The parent's connections themselves, not their id()s: the fork closes the idle ones and the
    # pool drops them, so without this reference the child's new connection could be allocated
    # at a freed one's address and ``id`` would call it the parent's (a CI run failed so).
    parents: list[sqlite3.Connection] = []
    inside = threading.Barrier(3)
    release = threading.Event()

    def hold() -> None:
        with pool.connection() as conn:
            parents.append(conn)
            conn.execute("SELECT count(*) FROM t").fetchone()
            inside.wait(60)
            release.wait(60)

    holders = [threading.Thread(target=hold) for _ in range(2)]
    for thread in holders:
        thread.start()
    try:
        inside.wait(60)
        _armed.append(release)

        def child() -> bool:
            with pool.immediate() as conn:
                mine = conn
                conn.execute("INSERT INTO t VALUES ('child')")
            with pool.connection() as conn:
                rows = sorted(v for (v,) in conn.execute("SELECT v FROM t"))
            pool.close()
            return all(mine is not theirs for theirs in parents) and rows == ["child", "parent"]

        outcome = in_child(child, timeout=30)
    finally:
        _armed.clear()
        release.set()
        for thread in holders:
            thread.join(60)
    assert outcome != "hung", "the child waited for the parent threads' connections"
    assert outcome == 0, f"child: exit {outcome} (2: it used a parent's connection or read other rows)"
    with pool.connection() as conn:  # the child's close left the parent's connections alone
        assert sorted(v for (v,) in conn.execute("SELECT v FROM t")) == ["child", "parent"]
    pool.close()


def _commit_in_child(catalog: Catalog, done, message: str = "child", then=None) -> None:
    """A multiprocessing worker's job: commit a version, read it back, close the catalog. With
    ``then`` (two events): say so, wait for the parent, commit once more and end without
    closing the catalog (as a torch DataLoader worker ends: ``os._exit``)."""
    version = catalog.commit("ds", [Put(rec(f"{message}.txt"))], message=message)
    keys = [r.key for r in catalog.list_records("ds", version.seq)]
    done.put(keys)
    if then is None:
        catalog.close()
        return
    said, go_on = then
    said.set()
    assert go_on.wait(60), "never told to go on"
    catalog.commit("ds", [Put(rec("after.txt"))], message="after the parent closed")


def run_worker(ctx, *args) -> int | None:
    worker = ctx.Process(target=_commit_in_child, args=args)
    worker.start()
    return worker


def test_a_multiprocessing_worker_commits_through_its_parents_catalog_mid_commit(tmp_path) -> None:
    """A parent thread is inside a commit (its turn, a connection in a write transaction) when
    a ``multiprocessing`` worker (start method "fork") starts and commits through the same
    ``Catalog``. The fork waits for the parent's commit (its thread is let go at the fork);
    the worker opens its own connections and lock file, commits after it and closes only its
    own; the database stays whole. On main the worker waited for the parent thread's turn,
    which never ends in a child, until the catalog refused it as busy."""
    catalog = Catalog(SQLiteCatalogStore(tmp_path / "catalog.db", commit_wait_s=30))
    catalog.create_dataset("ds")
    catalog.commit("ds", [Put(rec("first.txt"))])
    inside, release = threading.Event(), threading.Event()

    def changes():
        yield Put(rec("parent.txt"))
        inside.set()
        assert release.wait(60), "never released"

    writer = threading.Thread(target=lambda: catalog.commit("ds", changes(), message="parent"))
    writer.start()
    ctx = multiprocessing.get_context("fork")
    done = ctx.Queue()
    try:
        assert inside.wait(60)
        _armed.append(release)
        worker = run_worker(ctx, catalog, done)
        worker.join(90)
        if worker.is_alive():
            worker.kill()
            worker.join()
    finally:
        _armed.clear()
        release.set()
        writer.join(60)
    assert worker.exitcode == 0, f"the worker: exit code {worker.exitcode} (on main: Busy, the parent's turn)"
    assert sorted(done.get(timeout=10)) == ["child.txt", "first.txt", "parent.txt"]
    assert [v.message for v in catalog.log("ds")][:2] == ["child", "parent"]
    catalog.close()
    with sqlite3.connect(tmp_path / "catalog.db") as check:
        assert check.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_a_workers_commit_after_its_parent_closed_the_catalog_is_kept(tmp_path) -> None:
    """The parent opened and used the catalog (connections open, idle), then started a worker
    (start method "fork") that commits through it; the parent closes its catalog while the
    worker still works, and the worker commits again and ends (without closing, as DataLoader
    workers do). On main the worker used the parent's connection, whose locks the kernel does
    not give a child: the parent's close found itself the last user, checkpointed and deleted
    the WAL, and the worker's second commit went to the deleted file: reported done, then
    lost."""
    path = tmp_path / "catalog.db"
    catalog = Catalog(SQLiteCatalogStore(path))
    catalog.create_dataset("ds")
    catalog.commit("ds", [Put(rec("first.txt"))])
    assert [r.key for r in catalog.list_records("ds", 1)] == ["first.txt"]
    ctx = multiprocessing.get_context("fork")
    done, said, go_on = ctx.Queue(), ctx.Event(), ctx.Event()
    worker = run_worker(ctx, catalog, done, "child", (said, go_on))
    try:
        assert said.wait(60), "the worker's first commit did not end"
        catalog.close()  # the parent is done with the catalog; the worker is not
        go_on.set()
        worker.join(90)
    finally:
        go_on.set()
        if worker.is_alive():
            worker.kill()
        worker.join()
    assert worker.exitcode == 0, f"the worker: exit code {worker.exitcode}"
    with Catalog(SQLiteCatalogStore(path)) as again:
        messages = [v.message for v in again.log("ds")]
    assert messages[0] == "after the parent closed", f"the worker's last commit was lost: {messages}"
    with sqlite3.connect(path) as check:
        assert check.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_a_parent_and_its_child_ask_the_catalog_server_through_one_client(tmp_path) -> None:
    """One HttpCatalogStore, opened and used in the parent; then the parent asks for dataset
    "parent" and the child for dataset "child1" at once. On main both used the parent's pooled
    keep-alive connection: one got the other's answer."""
    server, backing, token = serve(tmp_path)
    try:
        backing.create_dataset("parent", description="P")
        backing.create_dataset("child1", description="C")
        remote = HttpCatalogStore(server.url, token=token, attempts=1, timeout=5)
        assert remote.get_dataset("parent").name == "parent"  # a pooled connection is open at the fork

        def asks(name: str) -> list[str]:
            return wrong_answers(
                lambda: remote.get_dataset(name),
                lambda got: None if got.name == name else f"asked for {name}, got {got.name}",
                ROUNDS,
            )

        def child_asks() -> bool:
            wrong = asks("child1")
            for line in wrong:
                print("child:", line)
            remote.close()
            return not wrong

        outcome, wrong = at_once(lambda: asks("parent"), child_asks)
        assert outcome == 0, f"child: {outcome} (2: it got an answer meant for the parent, or none)"
        assert not wrong, f"the parent: {wrong[:3]}"
        assert remote.get_dataset("parent").description == "P"  # the child's close left the parent's pool
        remote.close()
    finally:
        server.stop()
        backing.close()
