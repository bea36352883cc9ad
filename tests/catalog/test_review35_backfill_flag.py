"""review35: ``datahub migrate`` (the Mongo directory table's backfill) stalled past its claim's
lease while a commit took the claim over: no version ever lists from a table without its changes.

The stall is simulated at the one point that matters, just before the pass sets the flag: the
lease runs out on the store's stand-in clock (mongomock), and another writer takes the claim
over and commits a new directory, having read the flag unset (it keeps no table)."""

from __future__ import annotations

from typing import Any

from datahub.catalog import Catalog, Put
from datahub.catalog.mongo_dirs_backfill import backfill
from datahub.catalog.mongo_store import MongoCatalogStore
from tests.catalog.conftest import SMALL, mongo_url, rec
from tests.catalog.test_mongo_commit_protocol import Clock, second_writer


class _StallsAtTheFlag:
    """The pass's ``datasets``: ``before`` runs just before its first write of the flag, and
    ``after`` just after it."""

    def __init__(self, inner: Any, before: Any, after: Any) -> None:
        self.inner, self.before, self.after, self.done = inner, before, after, False

    def update_one(self, query: Any, update: Any, *args: Any, **kwargs: Any) -> Any:
        if update != {"$set": {"dirs": True}} or self.done:
            return self.inner.update_one(query, update, *args, **kwargs)
        self.done = True
        self.before()
        result = self.inner.update_one(query, update, *args, **kwargs)
        self.after()
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_stalled_backfill_never_flags_a_table_a_commit_that_took_its_claim_did_not_keep() -> None:
    clock = Clock()
    store = MongoCatalogStore(mongo_url("mongomock"), clock=clock, lease_seconds=60.0, **SMALL)
    try:
        Catalog(store).create_dataset("ds")
        Catalog(store).commit("ds", [Put(rec("a/x"))])
        store.datasets.update_one({"_id": "ds"}, {"$set": {"dirs": False}})  # made before the table
        store.dirs.delete_many({})
        other, reader = second_writer(store, clock), second_writer(store, clock)
        listings: list[list[Any]] = []

        def stall() -> None:
            clock.now += 61  # the pass's lease runs out ...
            assert other.commit("ds", [Put(rec("b/y"))]).seq == 2  # ... a commit takes its claim over

        def look() -> None:
            listings.append(list(reader.list_directory("ds", 2)))

        pass_store = MongoCatalogStore(
            store.url, client=store.client, clock=clock, lease_seconds=60.0, **SMALL
        )
        pass_store.datasets = _StallsAtTheFlag(pass_store.datasets, stall, look)
        assert backfill(pass_store, "ds") is False  # the pass starts over ...
        look()
        assert backfill(store, "ds") is True  # ... and then fills the table
        look()
        assert store.datasets.find_one({"_id": "ds"})["dirs"] is True
        assert listings == [["a/", "b/"]] * 3  # never "b/y" as a file of the top level
    finally:
        store.close()
