"""The MongoDB directory table (issue 38, ``datahub/catalog/mongo_dirs.py``): an old version's
root listing with and without the table, the commits that keep it, and the backfill.

    .venv/bin/python bench/catalog/mongo_dir_table.py [--records 1000] [--later 1200] [--rounds 5] [--url URL]

mongomock by default (``--url mongodb://...`` for a real server). mongomock times are not
server times: it scans collections in Python, and its inserts slow down with the
collection's size, so the catalog here is small and the figures that carry over are counts:
per listing, the ``records`` index entries a server walks (``by_key`` range in key order up to
the query's last match, replayed with ``count_documents``: what explain reports as
``totalKeysExamined``) plus the ``dirs`` documents read, and the documents a commit writes.
CPU ms per listing are mongomock's, for an A/B in the same run only.

One database per dataset (mongomock's inserts slow down with each collection's size), the
same commits to both, alternated: ``kept`` keeps the table, ``plain`` is flagged as a dataset
an older datahub made (no ``dirs`` flag: commits and listings as before the table).

- v1: ``--records`` keys ``sNN/dNN/fNNN.jpg`` over 20 top directories ``s00..s19``;
- v2: a 1 % commit spread over the key space (modified, deleted, added);
- v3: ``--later`` keys under ``s100/`` … ``s111/`` (they sort between v1's ``s10/`` and ``s11/``);
- v4: every key of ``s05/`` deleted (a version under a deleted subtree).

Then per round, alternated, the roots of v1, v3 and v4 listed on ``kept`` with the table and
without it (the flag unset for the measure: the old path on the same data). Last, the
backfill of ``kept`` (its table dropped): CPU seconds, and whether it filled the same table.
Every figure line carries the load average (the machine may be shared).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from datahub.catalog import Catalog, Delete, Put, Record  # noqa: E402
from datahub.catalog.mongo_store import MongoCatalogStore  # noqa: E402
from tests.catalog.test_mongo_dirs import examined  # noqa: E402

TOPS = 20
PER_DIR = 50


def key(i: int, top: int) -> str:
    d, f = divmod(i, PER_DIR)
    return f"s{top:02}/d{d:02}/f{f:03}.jpg"


def v1_keys(n: int) -> list[str]:
    return [key(i, top) for top in range(TOPS) for i in range(n // TOPS)]


def record(k: str, generation: int) -> Record:
    return Record(
        k, f"s3://bench-bucket/{k}", f"e{generation:08x}", 100_000 + len(k), meta={"split": "train"}
    )


def spread(keys: list[str]) -> list[Put | Delete]:
    """1 % of v1, one key every 100: 3 modified, 1 deleted, 1 added (a new file beside it)."""
    out: list[Put | Delete] = []
    for j, k in enumerate(keys[::100]):
        kind = j % 5
        if kind < 3:
            out.append(Put(record(k, 1)))
        elif kind == 3:
            out.append(Delete(k))
        else:
            out.append(Put(record(k.replace(".jpg", "-new.jpg"), 1)))
    return out


def later(n: int) -> list[Put]:
    per = n // 12
    return [Put(record(key(i, top), 2)) for top in range(100, 112) for i in range(per)]


def load() -> str:
    return "load {:.1f} {:.1f} {:.1f}".format(*os.getloadavg())


def cpu() -> float:
    t = os.times()
    return t.user + t.system


def commit(catalog: Catalog, dataset: str, changes: list, label: str) -> None:
    store = catalog.store
    before = store.records.count_documents({})  # type: ignore[attr-defined]
    c0 = cpu()
    seq = catalog.commit(dataset, changes).seq
    c = cpu() - c0
    after = store.records.count_documents({})  # type: ignore[attr-defined]
    dirs = store.dirs.count_documents({"seq": seq})  # type: ignore[attr-defined]
    print(
        f"commit {label:<16} {dataset:<6} {len(changes):>6,} changes  CPU {c:7.2f} s  new revisions "
        f"{after - before:>6,}  dirs documents written {dirs:>4}  {load()}",
        flush=True,
    )


def measure(store: MongoCatalogStore, seq: int, with_table: bool) -> str:
    """One listing for its CPU time, then the same listing again with the entries it examines
    counted (the count's own ``count_documents`` left out of the CPU figure)."""
    catalog = Catalog(store)
    store.datasets.update_one({"_id": "kept"}, {"$set": {"dirs": with_table}})
    c0 = time.thread_time()
    entries = list(catalog.list_directory("kept", seq))
    c = time.thread_time() - c0
    queries = [0]
    count, again = examined(store, lambda: list(catalog.list_directory("kept", seq)), queries)
    assert again == entries
    store.datasets.update_one({"_id": "kept"}, {"$set": {"dirs": True}})
    return (
        f"v{seq} root {'table' if with_table else 'no table':<8} {len(entries):>3} entries  "
        f"entries examined {count:>6,}  queries {queries[0]:>3}  CPU {c * 1000:8.1f} ms (mongomock)  {load()}"
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, default=1000)
    p.add_argument("--later", type=int, default=1200)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--url", default="mongomock://localhost", help="server URL without a database name")
    args = p.parse_args(argv)
    stores = {}
    for name in ("kept", "plain"):
        stores[name] = MongoCatalogStore(f"{args.url.rstrip('/')}/bench_{uuid.uuid4().hex[:8]}")
        Catalog(stores[name]).create_dataset(name)
    stores["plain"].datasets.update_one({"_id": "plain"}, {"$unset": {"dirs": ""}})
    print(
        f"mongo directory table bench: {args.records:,} records, {args.later:,} later, {args.url}  {load()}"
    )
    keys = v1_keys(args.records)
    s05 = [k for k in keys if k.startswith("s05/")]
    v2 = spread(keys)
    gone = {c.key for c in v2 if isinstance(c, Delete)}
    added = {c.record.key for c in v2 if isinstance(c, Put) and c.record.key not in keys}
    v4 = [Delete(k) for k in sorted((set(s05) - gone) | {k for k in added if k.startswith("s05/")})]
    steps = [
        ("v1 import", [Put(record(k, 0)) for k in keys]),
        ("v2 1 % spread", v2),
        ("v3 later subtrees", later(args.later)),
        ("v4 s05/ deleted", v4),
    ]
    for label, changes in steps:
        for name in ("kept", "plain") if label != "v1 import" else ("plain", "kept"):
            commit(Catalog(stores[name]), name, changes, label)
    kept = stores["kept"]
    print(
        f"dirs documents of kept: {kept.dirs.count_documents({})}; records: {kept.records.count_documents({})}"
    )
    for r in range(args.rounds):
        for seq in (1, 3, 4):
            order = (True, False) if r % 2 == 0 else (False, True)
            for with_table in order:
                print(f"round {r}  " + measure(kept, seq, with_table), flush=True)
    table = sorted(
        (d["path"], d["from_seq"], d["to_seq"], d["live"]) for d in kept.dirs.find({}, {"_id": 0, "seq": 0})
    )
    kept.datasets.update_one({"_id": "kept"}, {"$unset": {"dirs": ""}})
    kept.dirs.delete_many({})
    c0 = cpu()
    filled = kept.fill_directory_tables()
    c = cpu() - c0
    again = sorted(
        (d["path"], d["from_seq"], d["to_seq"], d["live"]) for d in kept.dirs.find({}, {"_id": 0, "seq": 0})
    )
    revisions = kept.records.count_documents({})
    print(
        f"backfill {filled}: CPU {c:.2f} s for {revisions:,} revisions ({revisions / c:,.0f}/CPU-s, mongomock)"
        f"  same table as the commits kept: {again == table}  {load()}"
    )
    for store in stores.values():
        store.drop()
        store.close()


if __name__ == "__main__":
    main()
