"""What storing a deleted key unsettled costs a workspace commit: two source trees taking turns.

    .venv/bin/python bench/writeback/commit_deletes.py BASE_TREE [--rounds 4] [--files 4000] [--deleted 0.5]

review19a. Since then ``commit_base.Writes.note`` stores each key the commit may delete as
unsettled before the catalog commit (one more spilled row and one more journal entry in
``Base.expect``'s transactions per deleted key), so that a delete whose reply was lost does not
hide the same file written again. ``BASE_TREE`` is another checkout of the repository (``git
archive BASE | tar -x -C /var/tmp/base``); this tree is "head". Each round runs one child
process per tree (its ``datahub`` imported from that tree: checked), alternating which goes
first. A child writes ``--files`` small files into a workspace on a local shared tier, commits
them to a SQLite catalog, deletes the fraction ``--deleted`` of them, flushes, and times the
second commit (process CPU, and wall). Printed per child: the commit's CPU milliseconds and
microseconds per deleted file, the version's (added, removed, modified) and the journal
entries the commit stored before the catalog commit (``expect``). CPU is the figure; wall
swings with the shared machine's load (printed before and after each round).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HEAD = Path(__file__).resolve().parents[2]


def _child(spec: dict) -> dict:
    import datahub
    from datahub import commit_base
    from datahub.catalog import open_catalog
    from datahub.config import load_config
    from datahub.storage import StoreRegistry
    from datahub.workspaces import commit_workspace
    from datahub.writeback import open_workspace

    expected = []
    apply = commit_base.Base.expect

    def counted(self, entries):  # the rows expect stores: a count, on both trees alike
        rows = list(entries)
        expected.append(len(rows))
        return apply(self, rows)

    commit_base.Base.expect = counted
    files, every = spec["files"], round(1 / spec["deleted"])
    with tempfile.TemporaryDirectory(dir=spec["scratch"]) as tmp:
        config = load_config(env={}, overrides={"home": f"{tmp}/var", "cache": {"flush_interval": 3600}})
        stores = StoreRegistry(config)
        catalog = open_catalog(f"sqlite:///{tmp}/catalog.db")
        ws = open_workspace("ws", config, stores, background=False)
        for d in range(20):
            ws.mkdir(f"d{d}")
        for n in range(files):
            with ws.open(f"d{n % 20}/f{n}", create=True) as fh:
                fh.write(0, f"file {n} of a delete benchmark\n".encode() * 8)
        commit_workspace(ws, catalog, "bench")
        deleted = [n for n in range(files) if n % every == 0]
        for n in deleted:
            ws.unlink(f"d{n % 20}/f{n}")
        ws.flush()
        expected.clear()
        cpu, wall = time.process_time(), time.monotonic()
        version = commit_workspace(ws, catalog, "bench")
        cpu, wall = time.process_time() - cpu, time.monotonic() - wall
        ws.close()
        catalog.close()
        stores.close()
    return {
        "datahub": os.path.dirname(datahub.__file__),
        "files": files,
        "deleted": len(deleted),
        "commit_cpu_ms": round(1000 * cpu, 1),
        "commit_wall_ms": round(1000 * wall, 1),
        "cpu_us_per_deleted_file": round(1e6 * cpu / len(deleted), 1),
        "version": [version.added, version.removed, version.modified],
        "expect_rows": sum(expected),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("base_tree", nargs="?", help="another checkout of the repository (the base)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--files", type=int, default=4000)
    ap.add_argument("--deleted", type=float, default=0.5, help="fraction of the files deleted (0 < f <= 1)")
    ap.add_argument("--scratch", default="/var/tmp")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        print(json.dumps(_child(json.loads(args.child))))
        return
    if args.base_tree is None or not 0 < args.deleted <= 1:
        ap.error("give BASE_TREE, and --deleted in (0, 1]")
    sys.path.insert(0, str(HEAD))
    from bench.writeback.gc_rewriter import _load, run_child

    trees = {"base": Path(args.base_tree).resolve(), "head": HEAD}
    results: dict[str, list[dict]] = {name: [] for name in trees}
    for r in range(args.rounds):
        print(f"round {r + 1}: {_load()}", flush=True)
        for name in ["base", "head"] if r % 2 == 0 else ["head", "base"]:
            spec = {"files": args.files, "deleted": args.deleted, "scratch": args.scratch}
            result = run_child(Path(__file__), trees[name], json.dumps(spec))
            results[name].append(result)
            print(f"  {name}: {json.dumps(result)}", flush=True)
        print(f"  after: {_load()}", flush=True)
    for name, rows in results.items():
        print(
            f"{name}: median commit CPU {statistics.median(r['commit_cpu_ms'] for r in rows)} ms, "
            f"{round(statistics.median(r['cpu_us_per_deleted_file'] for r in rows), 1)} us per deleted file; "
            f"version {rows[0]['version']}, expect rows {rows[0]['expect_rows']}"
        )


if __name__ == "__main__":
    main()
