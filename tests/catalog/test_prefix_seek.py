"""A prefix listing seeks to its prefix: its cost does not grow with the keys before it.

SQLite is asked to count the virtual-machine steps of each listing (a progress handler): a
deterministic measure of the rows it visits, never a time. Without the seek, a listing of
the last folder of a version visited every key before it.
"""

from __future__ import annotations

from pathlib import Path

from datahub.catalog import Put, Record, open_catalog
from tests.catalog.conftest import sqlite_steps


def steps(catalog, prefix: str, start_after: str = "") -> tuple[int, list[str]]:
    return sqlite_steps(
        catalog,
        lambda: [
            r.key for r in catalog.list_records("d", 1, prefix=prefix, start_after=start_after, limit=10)
        ],
    )


def test_a_prefix_listing_costs_the_same_at_the_start_and_at_the_end(tmp_path: Path):
    catalog = open_catalog(f"sqlite:///{tmp_path / 'c.db'}")
    catalog.create_dataset("d")
    keys = [f"{folder}/{i:05d}" for folder in ("a", "m", "z") for i in range(20_000)]
    catalog.commit("d", (Put(Record(k, "memory://b/k", "e", 1)) for k in keys))
    first, first_keys = steps(catalog, "a/")
    last, last_keys = steps(catalog, "z/")
    assert first_keys == [f"a/{i:05d}" for i in range(10)] and last_keys == [f"z/{i:05d}" for i in range(10)]
    assert last <= 3 * first + 20, (first, last)
    # a cursor before the prefix, and one inside it, list the same rows as the API promises
    assert steps(catalog, "z/", start_after="m/00005")[1] == last_keys
    assert steps(catalog, "z/", start_after="z/00004")[1] == [f"z/{i:05d}" for i in range(5, 15)]
    catalog.close()
