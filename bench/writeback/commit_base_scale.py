"""The journal's merge base at scale: what one workspace commit's bookkeeping costs at 10^5 files.

    .venv/bin/python bench/writeback/commit_base_scale.py [--files 10000 100000] [--rounds 3]

review17c. ``commit_workspace`` keeps the records its commits put into a dataset in the
journal's meta ``committed:<dataset>``, one JSON object (``_Base``): read once per commit,
written before the catalog commit (the union of old and new) and after it. For each size, in
one process: a real workspace journal (LMDB, local disk), N records with blob URLs of a local
objects store, and a SQLite catalog version of them. A "second commit" where one file changed:
process CPU ms of the head's listing from the catalog (a commit lists the head twice already:
the same-run baseline), of the base read, ``expect``, the merge (``_changes``) and ``settle``;
the JSON's bytes; the Python heap the base, the union and the wanted records hold at their
peak (tracemalloc, a pass of its own). And an A/B in alternation: thread CPU ms spent inside
the journal's write transaction (which holds off the workspace's closes and fsyncs) by one
store of the base with the JSON encoded inside it (as before review17c) and before it (now).
Wall time swings with the shared machine's load (printed): CPU is the figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

HEAD = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(HEAD))

from bench.writeback.gc_rewriter import _load  # noqa: E402
from datahub.catalog import Put, Record, open_catalog  # noqa: E402
from datahub.config import load_config  # noqa: E402
from datahub.ingest.blobs import blob_key  # noqa: E402
from datahub.storage import StoreRegistry  # noqa: E402
from datahub.workspaces import _Base, _changes  # noqa: E402
from datahub.writeback import open_workspace  # noqa: E402


def _records(ws, n: int, changed: int = -1) -> dict[str, Record]:
    """N records as a workspace commit makes them (blob URL, etag, size, checksum)."""
    out = {}
    for i in range(n):
        digest = f"{i if i != changed else n + i:064x}"
        url = ws.blobs.url_for(blob_key(digest))
        out[f"d{i % 100}/f{i}.bin"] = Record(
            f"d{i % 100}/f{i}.bin", url, f"{i:x}-1000", 1000, f"sha256:{digest}"
        )
    return out


def _cpu(fn):
    start = time.process_time()
    result = fn()
    return result, round(1000 * (time.process_time() - start), 1)


def _in_txn(journal, name: str, records: dict, encode_inside: bool) -> float:
    """Thread CPU ms inside the write transaction of one store of ``records``."""
    value = None if encode_inside else json.dumps(records, separators=(",", ":"))
    with journal.write("bench") as txn:
        start = time.thread_time()
        txn.put_meta(name, json.dumps(records, separators=(",", ":")) if encode_inside else value)
        spent = time.thread_time() - start
    return round(1000 * spent, 1)


def run(n: int, rounds: int, scratch: str) -> dict:
    with tempfile.TemporaryDirectory(dir=scratch) as tmp:
        config = load_config(env={}, overrides={"home": f"{tmp}/var", "cache": {"flush_interval": 3600}})
        with StoreRegistry(config) as stores:
            ws = open_workspace("ws", config, stores, background=False)
            catalog = open_catalog(f"sqlite:///{tmp}/catalog.db")
            first = _records(ws, n)
            catalog.create_dataset("bench")
            catalog.commit("bench", (Put(r) for r in first.values()))
            _Base(ws, "bench").settle(first)  # the first commit's record
            wanted = _records(ws, n, changed=7)  # one file changed since
            head, list_ms = _cpu(lambda: list(catalog.list_records("bench")))
            base, read_ms = _cpu(lambda: _Base(ws, "bench"))
            _, merge_ms = _cpu(lambda: list(_changes(iter(head), wanted, base.records)))
            _, expect_ms = _cpu(lambda: base.expect(wanted))
            _, settle_ms = _cpu(lambda: base.settle(wanted))
            with ws.journal.read() as txn:
                size = len((txn.meta("committed:bench") or "").encode())
            tracemalloc.start()
            again = _Base(ws, "bench")
            again.expect(_records(ws, n, changed=8))
            heap = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            ab: dict[str, list[float]] = {"inside": [], "before": []}
            union = again.records
            for r in range(rounds):
                for how in ("inside", "before") if r % 2 == 0 else ("before", "inside"):
                    ab[how].append(_in_txn(ws.journal, "committed:ab", union, how == "inside"))
            ws.close()
            catalog.close()
    return {
        "files": n,
        "head_listing_cpu_ms": list_ms,
        "base_read_cpu_ms": read_ms,
        "merge_cpu_ms": merge_ms,
        "expect_cpu_ms": expect_ms,
        "settle_cpu_ms": settle_ms,
        "journal_json_bytes": size,
        "heap_peak_mib_base_union_wanted": round(heap / 2**20, 1),
        "txn_cpu_ms_json_inside": ab["inside"],
        "txn_cpu_ms_json_before": ab["before"],
        "txn_cpu_ms_median_inside_before": [statistics.median(ab["inside"]), statistics.median(ab["before"])],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--scratch", default="/var/tmp")
    args = ap.parse_args()
    for n in args.files:
        print(f"{n} files: {_load()}", flush=True)
        print(f"  {json.dumps(run(n, args.rounds, args.scratch))}", flush=True)
        print(f"  after: {_load()}", flush=True)


if __name__ == "__main__":
    main()
