"""A workspace commit's own memory at 10^6 files, without building 10^6 files: this tree against another, same run.

    .venv/bin/python bench/scale/commit_walk.py BASE_TREE [--files 1000000] [--scratch /var/tmp]

commitmem18, issue 38. ``workspace_commit.py`` builds its workspace through the ``Workspace``
API, which at 10^6 files took more than half an hour of writes and a flush that had not
ended after that on this shared machine. This one measures the part of the commit that held
everything: the real ``commit_workspace`` on a real (empty) workspace journal, a real SQLite
catalog and a real local objects store, but with the workspace's flushed files made up
(``workspaces._flushed`` replaced: a list of ``FlushedObject`` on the base tree, which is what
it returns there, a spilled snapshot on this one; made inside the commit, so counted in it).

Per side, in processes of their own (the side's own ``datahub``): a setup process commits N
records to the dataset, as a workspace commit makes them (blob URLs, checksums), records them
as this journal's merge base in that side's own layout, and puts the blobs of the 1 % of the
files that changed (every 100th); then a measuring process commits the workspace: every
file unchanged since but those, whose pins find their blobs stored (a stat, and since
blobverify18 a read of the blob to check its sha256). Printed: wall and CPU seconds, CPU microseconds per file, the RSS before, ``VmHWM``
(reset just before the commit) and the sampled peak of ``RssAnon``; with ``--tracemalloc``
also the Python heap's peak (tracing costs CPU: a run of its own). CPU is the figure; wall
swings with the load (printed).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import sys
import time
from pathlib import Path

HEAD = Path(__file__).resolve().parents[2]
try:
    from bench.scale.workspace_commit import _config, _load, _measured, _run
except ImportError:  # a child on the base tree, which has no such script: this one's, not the tree
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # each side's datahub stays its own
    from workspace_commit import _config, _load, _measured, _run


def _key(i: int) -> str:
    return f"d{i // 1000:05d}/f{i:08d}.txt"


def _content(i: int, n: int) -> bytes:
    """File i's bytes as committed (every 100th file: other bytes now, when ``n`` is given)."""
    generation = 1 if n and i % 100 == 0 else 0
    return f"output {i} of a workspace commit benchmark, generation {generation}\n".encode()


def _digest(i: int, n: int = 0) -> tuple[str, int]:
    data = _content(i, n)
    return hashlib.sha256(data).hexdigest(), len(data)


def setup(home: str, n: int) -> dict:
    import datahub.workspaces as workspaces
    from datahub.catalog import Put, Record, open_catalog
    from datahub.ingest.blobs import blob_key
    from datahub.storage import StoreRegistry
    from datahub.writeback import open_workspace

    cpu = time.process_time()
    config = _config(home)
    with StoreRegistry(config) as stores:
        ws = open_workspace("ws", config, stores, background=False)
        catalog = open_catalog(f"sqlite:///{home}/bench-catalog.db")

        def record(i: int) -> Record:
            digest, size = _digest(i)
            return Record(_key(i), ws.blobs.url_for(blob_key(digest)), f"etag-{i}", size, f"sha256:{digest}")

        catalog.create_dataset("outputs")
        catalog.commit("outputs", (Put(record(i)) for i in range(n)))
        if hasattr(workspaces, "_plan"):  # this tree's layout: an entry per key, streamed
            from datahub.commit_base import Base

            ident = workspaces._ident
            Base(ws, "outputs").settle((_key(i), [ident(record(i))]) for i in range(n))
        else:  # the base tree's: one JSON value
            workspaces._Base(ws, "outputs").settle({_key(i): record(i) for i in range(n)})
        for i in range(0, n, 100):  # the changed files' blobs, of their very bytes (a pin checks them)
            data = _content(i, n)
            ws.blobs.put(blob_key(_digest(i, n)[0]), io.BytesIO(data), len(data))
        catalog.close()
        ws.close()
    return {"setup_cpu_s": round(time.process_time() - cpu, 1)}


def measure(home: str, n: int, trace: bool = False) -> dict:
    import datahub
    import datahub.workspaces as workspaces
    from datahub.catalog import open_catalog
    from datahub.storage import StoreRegistry
    from datahub.writeback import FlushedObject, open_workspace

    config = _config(home)
    with StoreRegistry(config) as stores:
        ws = open_workspace("ws", config, stores, background=False)
        catalog = open_catalog(f"sqlite:///{home}/bench-catalog.db")
        url = ws.blobs.url_for("workspaces/ws/unused")  # never read: each changed file's blob is stored
        if hasattr(workspaces, "_plan"):
            from datahub.commit_base import Spill

            def flushed(_ws):
                spill = Spill()
                for i in range(n):
                    digest, size = _digest(i, n)
                    spill.add((_key(i), f"o-{i}", size, digest))
                return spill
        else:

            def flushed(_ws):
                return [FlushedObject(_key(i), url, f"o-{i}", *reversed(_digest(i, n))) for i in range(n)]

        real, workspaces._flushed = workspaces._flushed, flushed
        try:
            measured = _measured(lambda: workspaces.commit_workspace(ws, catalog, "outputs"), n, trace)
        finally:
            workspaces._flushed = real
        result = {"datahub": os.path.dirname(datahub.__file__), "files": n, **measured}
        catalog.close()
        ws.close()
    return result


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("base_tree", nargs="?", help="another checkout of the repository (the base)")
    ap.add_argument("--files", type=int, default=1_000_000)
    ap.add_argument("--scratch", default="/var/tmp")
    ap.add_argument("--setup", metavar="HOME")
    ap.add_argument("--measure", metavar="HOME")
    ap.add_argument("--tracemalloc", action="store_true", help="also the Python heap's peak (slower)")
    args = ap.parse_args(argv)
    if args.setup:
        print(json.dumps(setup(args.setup, args.files)), flush=True)
        return
    if args.measure:
        print(json.dumps(measure(args.measure, args.files, args.tracemalloc)), flush=True)
        return
    trees = {"head": HEAD} | ({"base": Path(args.base_tree).resolve()} if args.base_tree else {})
    for name, tree in trees.items():
        home = Path(args.scratch) / f"commitmem18-walk-{name}-{args.files}"
        shutil.rmtree(home, ignore_errors=True)
        print(f"{args.files} files on {name}: {_load()}", flush=True)
        for step in ("--setup", "--measure"):
            extra = ["--tracemalloc"] if args.tracemalloc and step == "--measure" else []
            result = _run(tree, step, str(home), "--files", str(args.files), *extra, script=__file__)
            print(f"  {json.dumps(result)}", flush=True)
        print(f"  after: {_load()}", flush=True)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
