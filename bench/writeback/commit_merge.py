"""What the three-way merge adds to a workspace commit: two source trees taking turns.

    .venv/bin/python bench/writeback/commit_merge.py BASE_TREE [--rounds 3] [--files 5000]

merge17. ``BASE_TREE`` is another checkout of the repository (``git archive BASE | tar -x -C
/var/tmp/base``); this tree is "head". Each round runs one child process per tree (its
``datahub`` imported from that tree: checked), alternating which goes first. A child opens a
workspace on a local shared tier, writes ``--files`` small files, commits them to a SQLite
catalog (the first commit, timed too), then rewrites one file and deletes another and times
the second commit: the one whose work is the merge (the head's records listed, the journal's
record of what this workspace committed read and written twice on "head"; one file to pin).
Printed per child: process CPU milliseconds of each commit, the second version's
added/removed/modified counts (the same on both trees: nobody else committed), and on "head"
the bytes the journal keeps per committed file. CPU per commit is the figure; wall time swings
with the shared machine's load (printed before and after each round).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HEAD = Path(__file__).resolve().parents[2]


def _timed(fn):
    cpu = time.process_time()
    result = fn()
    return result, round(1000 * (time.process_time() - cpu), 1)


def _child(spec: dict) -> dict:
    import datahub
    from datahub.catalog import open_catalog
    from datahub.config import load_config
    from datahub.storage import StoreRegistry
    from datahub.workspaces import commit_workspace
    from datahub.writeback import open_workspace

    with tempfile.TemporaryDirectory(dir=spec["scratch"]) as tmp:
        config = load_config(env={}, overrides={"home": f"{tmp}/var", "cache": {"flush_interval": 3600}})
        stores = StoreRegistry(config)
        catalog = open_catalog(f"sqlite:///{tmp}/catalog.db")
        ws = open_workspace("ws", config, stores, background=False)
        for d in range(20):
            ws.mkdir(f"d{d}")
        for n in range(spec["files"]):
            with ws.open(f"d{n % 20}/f{n}", create=True) as fh:
                fh.write(0, f"file {n} of a merge benchmark\n".encode() * 8)
        ws.flush()
        _v1, first_ms = _timed(lambda: commit_workspace(ws, catalog, "bench"))
        with ws.open("d1/f1", truncate=True) as fh:
            fh.write(0, b"rewritten")
        ws.unlink("d2/f2")
        ws.flush()
        v2, second_ms = _timed(lambda: commit_workspace(ws, catalog, "bench"))
        with ws.journal.read() as txn:
            kept = txn.meta("committed:bench") or ""
        ws.close()
        catalog.close()
        stores.close()
    return {
        "datahub": os.path.dirname(datahub.__file__),
        "files": spec["files"],
        "first_commit_cpu_ms": first_ms,
        "second_commit_cpu_ms": second_ms,
        "second_version": [v2.added, v2.removed, v2.modified],
        "journal_bytes_per_file": round(len(kept.encode()) / spec["files"], 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("base_tree", nargs="?", help="another checkout of the repository (the base)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--files", type=int, default=5000)
    ap.add_argument("--scratch", default="/var/tmp")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        print(json.dumps(_child(json.loads(args.child))))
        return
    sys.path.insert(0, str(HEAD))
    from bench.writeback.gc_rewriter import _load, run_child

    trees = {"base": Path(args.base_tree).resolve(), "head": HEAD}
    results: dict[str, list[dict]] = collections.defaultdict(list)
    for r in range(args.rounds):
        print(f"round {r + 1}: {_load()}", flush=True)
        for name in ["base", "head"] if r % 2 == 0 else ["head", "base"]:
            spec = {"files": args.files, "scratch": args.scratch}
            result = run_child(Path(__file__), trees[name], json.dumps(spec))
            results[name].append(result)
            print(f"  {name}: {json.dumps(result)}", flush=True)
        print(f"  after: {_load()}", flush=True)
    for name, rows in sorted(results.items()):
        print(
            f"{name}: median CPU ms, first commit {statistics.median(r['first_commit_cpu_ms'] for r in rows)}, "
            f"second commit {statistics.median(r['second_commit_cpu_ms'] for r in rows)}; "
            f"second version (added, removed, modified) {rows[0]['second_version']}"
        )


if __name__ == "__main__":
    main()
