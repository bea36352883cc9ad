"""fork28: a rados:// store the PARENT opened and used, used directly by a forked child (a
DataLoader worker, a ``multiprocessing`` worker with the "fork" start method).

librados' threads (messenger, objecter timers, log) are the parent's: a child that used the
parent's ``rados.Rados`` handle and its I/O contexts sent ops that nothing in the child ever
answered, and waited for ever (Ceph's op timeout is one of those threads too). A child now
connects its own cluster handle on first use (``datahub.procs.PerProcess``), and its close
shuts down only its own: the parent's handle is kept, never used or shut down there.

The session's Ceph cluster (scripts/ceph-dev, ``DATAHUB_TEST_CEPH_ENV`` to reuse one).
"""

from __future__ import annotations

import threading
import uuid

import pytest

from datahub.storage import open_store
from tests.cache.test_fork25 import in_child
from tests.forked import at_once
from tests.storage.conftest import make_config

pytestmark = pytest.mark.ceph

SIZE = 4096
ROUNDS = 40


@pytest.fixture
def rados_store(ceph_cluster, tmp_path, monkeypatch):
    """A rados:// store on the session Ceph's pool under a fresh prefix, opened and used here
    (the cluster handle connected and I/O contexts open, one of them of a thread that ended):
    what a child inherits. Objects "parent" and "child" hold other bytes of one size."""
    monkeypatch.syspath_prepend(ceph_cluster.vars["CEPH_PYLIB"])
    monkeypatch.setenv("CEPH_CONF", ceph_cluster.vars["CEPH_CONF"])
    store = open_store(
        f"rados://{ceph_cluster.vars['CEPH_POOL']}/f28-{uuid.uuid4().hex[:12]}", make_config(tmp_path)
    )
    theirs = {"parent": b"P" * SIZE, "child": b"C" * SIZE}
    for key, data in theirs.items():
        store.put(key, data)
    thread = threading.Thread(target=store.read, args=("child",))
    thread.start()
    thread.join()
    assert store.read("parent") == theirs["parent"]  # this thread's I/O context is open at the fork
    try:
        yield store, theirs
    finally:
        for key in ("parent", "child", "mine"):
            store.delete(key)
        store.close()


def _reads(store, key: str, data: bytes) -> list[str]:
    """What went wrong in ROUNDS reads of ``key``, plain and under its etag."""
    wrong = []
    for _ in range(ROUNDS):
        try:
            got = store.read(key)
            got_under_etag = store.read(key, etag=store.stat(key).etag)
        except Exception as exc:  # reported by the test
            wrong.append(f"{type(exc).__name__}: {exc}")
            continue
        if got != data or got_under_etag != data:
            wrong.append(f"{len(got)} bytes starting {got[:4]!r}")
    return wrong


def test_a_parent_and_its_child_read_through_one_rados_store(rados_store) -> None:
    """The parent reads "parent" and the child "child" at once, the child puts an object and
    closes the store; the parent reads on, then also after the child exited. On main the
    child's first op went through the parent's cluster handle, whose threads the child does
    not have: it never got an answer (killed as hung)."""
    store, theirs = rados_store

    def child_work() -> bool:
        wrong = _reads(store, "child", theirs["child"])
        store.put("mine", b"made by the child")
        wrong += [] if store.read("mine") == b"made by the child" else ["the child's put"]
        for line in wrong:
            print("child:", line)
        store.close()  # the child's own handle; never the parent's
        return not wrong

    outcome, wrong = at_once(lambda: _reads(store, "parent", theirs["parent"]), child_work)
    assert outcome == 0, f"child: {outcome} (hung: it used the parent's cluster handle)"
    assert not wrong, f"the parent's reads: {wrong[:3]}"
    # the child exited (and closed the store there): the parent's session is whole
    assert not _reads(store, "parent", theirs["parent"])
    assert store.read("mine") == b"made by the child"
    thread = threading.Thread(target=lambda: _reads(store, "child", theirs["child"]))
    thread.start()  # a new thread of the parent opens a new I/O context on the parent's handle
    thread.join()


def test_a_child_that_only_closes_the_store_leaves_the_parents_handle(rados_store) -> None:
    """A child that closes the store it inherited without using it (a worker's teardown) shuts
    down nothing: on main it shut down the parent's handle (the child hung in it, and a close
    that got through left the parent's store closed)."""
    store, theirs = rados_store

    def child() -> bool:
        store.close()
        return True

    assert in_child(child, timeout=30) == 0
    assert store.read("parent") == theirs["parent"]
    assert store.read("child", etag=store.stat("child").etag) == theirs["child"]
