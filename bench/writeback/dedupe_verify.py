"""What checking a stored blob costs a commit that deduplicates N files (blobverify18).

    .venv/bin/python bench/writeback/dedupe_verify.py BASE_TREE [--rounds 4] [--files 1000] [--size BYTES]

``BASE_TREE`` is another checkout of the repository (``git archive BASE | tar -x -C DIR``);
this tree is "head". Each round runs one child process per tree, store and proof state,
alternating which tree goes first. A child writes ``--files`` files of their own content
(1-2 KB of text, or ``--size`` random bytes), flushes, commits them to a first dataset (every
blob is stored: untimed), and then times one commit of the same files to a second dataset:
each file is new there and its blob already stored, the deduplicated case. Base trusts a
stored blob after one stat; head proves it (``datahub.storage.blobs``). Proofs: ``cold``
forgets the proofs the first commit left in the process (a commit by another process: the
CLI, another node), ``warm`` keeps them (a mount daemon committing again). Stores: ``local``
(blobs in the home's ``file://`` objects; head reads and hashes each cold blob) and ``s3``
(blobs and workspace objects in a moto server started here; head compares the blob's etag
with the flush's md5 etag: no read), whose log gives the blob requests the timed commit sent.

Figures: process CPU per file (the pin threads included) and the blob bucket's requests;
wall time swings with the shared machine's load (printed before and after each round).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HEAD = Path(__file__).resolve().parents[2]


def _child(spec: dict) -> dict:
    import datahub
    from datahub.catalog import open_catalog
    from datahub.config import load_config
    from datahub.storage import StoreRegistry
    from datahub.workspaces import commit_workspace
    from datahub.writeback import open_workspace

    with tempfile.TemporaryDirectory(dir=spec["scratch"]) as tmp:
        overrides: dict = {"home": f"{tmp}/var", "cache": {"flush_interval": 3600}}
        if spec["store"] == "s3":
            overrides.update(spec["s3"])
            overrides["objects_url"] = f"s3://{spec['bucket']}/objects"
        config = load_config(env={}, overrides=overrides)
        stores = StoreRegistry(config)
        catalog = open_catalog(f"sqlite:///{tmp}/catalog.db")
        ws = open_workspace("ws", config, stores, background=False)
        for d in range(20):
            ws.mkdir(f"d{d}")
        for n in range(spec["files"]):
            with ws.open(f"d{n % 20}/f{n}", create=True) as fh:
                fh.write(0, _content(n, spec.get("size")))
        ws.flush()
        commit_workspace(ws, catalog, "stored-first")
        forgot = False
        if spec["proofs"] == "cold":
            try:
                from datahub.storage.blobs import VERIFIED
            except ImportError:  # the base has no proofs to forget
                pass
            else:
                VERIFIED.clear()
                forgot = True
        print("committing", flush=True)  # the parent counts requests from here
        cpu, wall = time.process_time(), time.monotonic()
        version = commit_workspace(ws, catalog, "bench")
        cpu, wall = time.process_time() - cpu, time.monotonic() - wall
        print("checking", flush=True)  # the parent stops counting here
        records = list(catalog.list_records("bench", version.seq))
        wrong = 0
        for record in records:
            store, key = stores.for_url(record.url)
            n = int(record.key.rsplit("/f", 1)[1])
            wrong += store.read(key, etag=record.etag) != _content(n, spec.get("size"))
        ws.close()
        catalog.close()
        stores.close()
    return {
        "datahub": os.path.dirname(datahub.__file__),
        "files": len(records),
        "cpu_ms_per_file": round(1000 * cpu / spec["files"], 3),
        "wall_s": round(wall, 2),
        "wrong_or_unreadable": wrong,
        "proofs_forgotten": forgot,
    }


def _content(n: int, size: int | None) -> bytes:
    if size is None:
        return f"file {n} of a dedupe benchmark\n".encode() * (40 + n % 40)
    import random

    return random.Random(n).randbytes(size)


def _run(tree: Path, spec: dict, moto) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, "-P", str(Path(__file__).resolve()), "--child", json.dumps(spec)]
    proc = subprocess.Popen(cmd, env=env, cwd=tree, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    marks: dict[str, int] = {}
    lines = []
    for line in proc.stdout:
        if line.strip() in ("committing", "checking") and moto is not None:
            marks[line.strip()] = moto.log_size()
        lines.append(line)
    if proc.wait() != 0:
        raise SystemExit(f"the child in {tree} failed")
    result = json.loads(lines[-1])
    if Path(result["datahub"]) != tree / "datahub":  # checked, not assumed
        raise SystemExit(f"the child in {tree} imported datahub from {result['datahub']}")
    result["datahub"] = "its own tree"  # (no absolute path in a recorded output)
    if moto is not None:
        sent = [collections.Counter(m for m, _p, _s in moto.answered(spec["bucket"], since=marks[mark]))
                for mark in ("committing", "checking")]  # fmt: skip
        result["blob_requests"] = dict(sorted((sent[0] - sent[1]).items()))
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("base_tree", nargs="?", help="another checkout of the repository (the base)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--stores", default="local,s3")
    ap.add_argument("--proofs", default="cold,warm")
    ap.add_argument("--scratch", default="/var/tmp")
    ap.add_argument("--size", type=int, default=None, help="bytes per file (random); default 1-2 KB of text")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        print(json.dumps(_child(json.loads(args.child))))
        return
    sys.path.insert(0, str(HEAD))
    from bench.writeback.gc_rewriter import _load
    from tests.servers import MotoServer

    moto = MotoServer() if "s3" in args.stores else None
    trees = {"base": Path(args.base_tree).resolve(), "head": HEAD}
    results: dict[tuple[str, str, str], list[dict]] = collections.defaultdict(list)
    try:
        for r in range(args.rounds):
            order = ["base", "head"] if r % 2 == 0 else ["head", "base"]
            print(f"round {r + 1}: {_load()}", flush=True)
            for store in args.stores.split(","):
                for proofs in args.proofs.split(","):
                    for name in order:
                        spec = {"store": store, "files": args.files, "scratch": args.scratch,
                                "size": args.size, "proofs": proofs}  # fmt: skip
                        if store == "s3":
                            spec["s3"] = moto.endpoint.s3_config_overrides()
                            spec["bucket"] = moto.endpoint.new_bucket("dedupe")
                        result = _run(trees[name], spec, moto if store == "s3" else None)
                        results[(store, proofs, name)].append(result)
                        print(f"  {store} {proofs} {name}: {json.dumps(result)}", flush=True)
            print(f"  after: {_load()}", flush=True)
    finally:
        if moto is not None:
            moto.stop()
    for (store, proofs, name), rows in sorted(results.items()):
        print(
            f"{store} {proofs} {name}: median CPU ms per file {statistics.median(r['cpu_ms_per_file'] for r in rows)}, "
            f"median wall s {statistics.median(r['wall_s'] for r in rows)}, "
            f"wrong or unreadable records {[r['wrong_or_unreadable'] for r in rows]}"
        )


if __name__ == "__main__":
    main()
