"""caller73: each catalog has an instance id, the same for every server of it, another for another.

The dataset browser names its cookies with it (``datahub.browser.session.session_cookie``): two
``datahub serve`` of two catalogs on one host must not share a cookie, and every replica of one
catalog (behind one address) must read the same. A SQLite file gets it when made or upgraded
(schema 10); a MongoDB catalog from the first server that asks.
"""

from __future__ import annotations

import re

from datahub.catalog.mongo_store import MongoCatalogStore
from datahub.catalog.sqlite_store import SQLiteCatalogStore
from tests.catalog.test_leases import user_version


def test_a_sqlite_catalog_keeps_one_instance_id_and_an_upgraded_file_gains_one(tmp_path) -> None:
    one, other = tmp_path / "one.db", tmp_path / "other.db"
    first, second = SQLiteCatalogStore(one), SQLiteCatalogStore(other)
    try:
        made = first.instance_id()
        assert re.fullmatch(r"[0-9a-f]{16}", made), made
        assert second.instance_id() != made
    finally:
        first.close()
        second.close()
    reopened = SQLiteCatalogStore(one)  # a restart, or a second server of the same file
    try:
        assert reopened.instance_id() == made
    finally:
        reopened.close()
    user_version(other, 9, "DROP TABLE catalog_meta")  # a file from before caller73
    upgraded = SQLiteCatalogStore(other)
    try:
        assert re.fullmatch(r"[0-9a-f]{16}", upgraded.instance_id())
        assert upgraded.instance_id() != made
    finally:
        upgraded.close()


def test_every_server_of_a_mongodb_catalog_reads_the_same_instance_id() -> None:
    import mongomock

    client = mongomock.MongoClient()
    a = MongoCatalogStore("mongomock://x/caller73a", client=client)
    b = MongoCatalogStore("mongomock://x/caller73a", client=client)
    c = MongoCatalogStore("mongomock://x/caller73b", client=client)
    made = b.instance_id()
    assert re.fullmatch(r"[0-9a-f]{16}", made)
    assert a.instance_id() == made and c.instance_id() != made
