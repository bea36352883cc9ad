"""fork28: a MongoDB catalog store and task queue the PARENT opened, used directly by a forked
child (a DataLoader worker, a ``multiprocessing`` worker with the "fork" start method).

pymongo documents ``MongoClient`` as not fork-safe: its pooled sockets and monitor threads are
the parent's. On main a child used the parent's client (pymongo warned "MongoClient opened
before fork" and reset the pools it had copied) and its close closed the parent's client
object there. A child now makes its own client on first use (``ProcessClient``, through
``datahub.procs.PerProcess``) and never uses or closes the parent's.

On mongomock only the client objects can be checked (a child's own, the parent's untouched);
on a real server (``DATAHUB_TEST_MONGO_URI``) also that pymongo never warns in the child and
that a parent and a child asking at once each get their own answers.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from datahub.catalog import Catalog
from datahub.catalog.model import Put
from datahub.catalog.mongo_store import MongoCatalogStore
from datahub.mongo_client import ProcessClient
from datahub.tasks.mongo import open_mongo_queue
from tests.cache.test_fork25 import in_child
from tests.catalog.conftest import mongo_url, rec
from tests.forked import at_once, wrong_answers

NO_SERVER = "needs a real MongoDB: set DATAHUB_TEST_MONGO_URI"
KINDS = [
    "mongomock",
    pytest.param(
        "mongo", marks=pytest.mark.skipif(not os.environ.get("DATAHUB_TEST_MONGO_URI"), reason=NO_SERVER)
    ),
]
ROUNDS = 20
COLLECTIONS = ("datasets", "versions", "records", "tags", "tokens", "commits", "staged", "epochs", "leases")


@pytest.fixture(params=KINDS)
def url(request: pytest.FixtureRequest) -> str:
    return mongo_url(request.param)


class _Untouchable:
    """In the child: what the child does with the parent's client, recorded."""

    def __init__(self, client: Any) -> None:
        self.calls: list[str] = []
        for name in ("close", "get_database", "drop_database", "start_session", "list_database_names"):
            setattr(client, name, self._recorder(name))

    def _recorder(self, name: str) -> Any:
        def called(*args: Any, **kwargs: Any) -> None:
            self.calls.append(name)
            raise AssertionError(f"the child called {name} on the parent's MongoDB client")

        return called


def _child_warnings() -> None:
    """pymongo's "MongoClient opened before fork" (a UserWarning) fails the child (its own
    process: the filter goes with it)."""
    warnings.simplefilter("error")


@pytest.fixture
def catalog(url: str) -> Iterator[Catalog]:
    """A Mongo catalog opened and used here: datasets "parent" and "child1", one version each."""
    store = MongoCatalogStore(url)
    catalog = Catalog(store)
    for name in ("parent", "child1"):
        catalog.create_dataset(name, description=name)
        catalog.commit(name, [Put(rec(f"{name}.txt"))], message=name)
    try:
        yield catalog
    finally:
        if not url.startswith("mongomock"):
            store.drop()
        catalog.close()


def test_a_child_uses_its_own_client_and_leaves_the_parents(catalog: Catalog) -> None:
    """The child reads and commits through the parent's catalog, then closes it. On main every
    collection it used was the parent client's, and its close closed the parent's client."""
    store = catalog.store
    parents = store.client
    assert isinstance(store, MongoCatalogStore)

    def child() -> bool:
        _child_warnings()
        untouchable = _Untouchable(parents)
        assert catalog.get_dataset("parent").description == "parent"  # the parent's data, as of the fork
        version = catalog.commit("child1", [Put(rec("mine.txt"))], message="the child's")
        keys = sorted(r.key for r in catalog.list_records("child1", version.seq))
        mine = store.client
        used = {name: getattr(store, name).database.client for name in COLLECTIONS}
        catalog.close()
        assert mine is not parents, "the child's client is the parent's"
        assert all(client is mine for client in used.values()), f"not the child's: {used}"
        assert keys == ["child1.txt", "mine.txt"], keys
        return not untouchable.calls

    assert in_child(child, timeout=60) == 0
    # the parent's client is still the parent's, open, and works
    assert store.client is parents
    version = catalog.commit("parent", [Put(rec("after.txt"))], message="after the child")
    assert sorted(r.key for r in catalog.list_records("parent", version.seq)) == ["after.txt", "parent.txt"]


def test_a_parent_and_its_child_ask_the_catalog_at_once(catalog: Catalog) -> None:
    """The parent asks for dataset "parent", the child for "child1", at once."""

    def asks(name: str) -> list[str]:
        return wrong_answers(
            lambda: catalog.get_dataset(name),
            lambda got: (
                None if got.name == name and got.description == name else f"asked for {name}, got {got.name}"
            ),
            ROUNDS,
        )

    parents = catalog.store.client

    def child_asks() -> bool:
        _child_warnings()
        untouchable = _Untouchable(parents)
        wrong = asks("child1") + untouchable.calls
        for line in wrong:
            print("child:", line)
        catalog.close()
        return not wrong

    outcome, wrong = at_once(lambda: asks("parent"), child_asks)
    assert outcome == 0, f"child: {outcome} (1: it used the parent's client or pymongo warned)"
    assert not wrong, f"the parent: {wrong[:3]}"
    assert catalog.store.client is parents and catalog.get_dataset("parent").description == "parent"


def test_a_child_claims_tasks_of_its_parents_queue_on_its_own_client(url: str) -> None:
    """A task queue opened and used by the parent (a job made); the child claims and completes
    a task, then closes the queue; the parent claims the next. On main the child used the
    parent's client and closed it."""
    queue = open_mongo_queue(url)
    queue.create_job("j", [{"n": 0}, {"n": 1}], {})
    parents = queue._tasks.database.client
    try:

        def child() -> bool:
            _child_warnings()
            untouchable = _Untouchable(parents)
            task = queue.claim("j", "child", 60)
            assert task is not None and task.index == 0
            queue.complete("j", task.index, task.lease, {"by": "child"})
            mine = queue._tasks.database.client
            queue.close()
            assert mine is not parents, "the child's client is the parent's"
            return not untouchable.calls

        assert in_child(child, timeout=60) == 0
        assert queue._tasks.database.client is parents
        task = queue.claim("j", "parent", 60)
        assert task is not None
        queue.complete("j", task.index, task.lease, {"by": "parent"})
    finally:
        if not url.startswith("mongomock"):
            parents.drop_database(url.rpartition("/")[2].partition("?")[0])
        queue.close()


@pytest.mark.parametrize("with_url", [True, False], ids=["from the URL", "from the given client"])
def test_a_child_makes_its_own_pymongo_client(with_url: bool) -> None:
    """Without a server: pymongo's side of ``ProcessClient``. A child connects to the URL, or
    copies a given client's arguments (pymongo's ``_duplicate``); the parent's is never used or
    closed there."""
    import pymongo

    url = "mongodb://127.0.0.1:9/fork28?serverSelectionTimeoutMS=100"
    given = pymongo.MongoClient(url, connect=False)
    clients = ProcessClient(url if with_url else "", given, closes_given=True)
    assert clients.get() is given

    def child() -> bool:
        untouchable = _Untouchable(given)
        mine = clients.get()
        clients.close()
        return isinstance(mine, pymongo.MongoClient) and mine is not given and not untouchable.calls

    try:
        assert in_child(child, timeout=30) == 0
        assert clients.get() is given
    finally:
        clients.close()


def test_a_queue_closes_the_client_it_was_given() -> None:
    """In its own process the queue still closes the client it was given (as before fork28)."""
    import mongomock

    from datahub.tasks.mongo import MongoTaskQueue

    client = mongomock.MongoClient()
    closed: list[bool] = []
    client.close = lambda: closed.append(True)
    queue = MongoTaskQueue(client.get_database("fork28"), client=client)
    queue.create_job("j", [{"n": 0}], {})
    queue.close()
    assert closed == [True]
