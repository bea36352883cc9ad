"""What a commit of many small files costs to pin as blobs: two source trees taking turns.

    .venv/bin/python bench/writeback/commit_pin.py BASE_TREE [--rounds 4] [--files 2000]

pinblobs16. ``BASE_TREE`` is another checkout of the repository (``git archive BASE | tar
-x -C /var/tmp/base``); this tree is "head". Each round runs one child process per tree and
store (its ``datahub`` imported from that tree: checked), alternating which tree goes first.
A child opens a workspace on a local shared tier, writes ``--files`` new files of 1-2 KB
(each its own content, so every file is a new blob to pin), flushes, and then times one
``commit_workspace`` into a SQLite catalog: the process CPU (its pin threads included) per
file. Stores: ``local`` (blobs in the home's ``file://`` objects directory) and ``s3`` (the
workspace's flush target and the blobs in two buckets of one moto server started here, whose
log gives the requests the commit sent: GETs of the workspace objects, HEADs and PUTs of
blobs). Every file's record is read back under its etag after the commit (``unreadable``).
CPU per file and request counts are the figures; wall time swings with the shared machine's
load (printed before and after each round).

``--size BYTES``: each file that many random bytes instead. ``--dedupe`` (blobs17): every
blob is stored first (the workspace committed to another dataset, untimed), so the timed
commit finds each one stored (a stat, no read, no put); then, timed apart (``verify_*``), each
stored blob is read back whole under its etag and hashed: what a commit that checked the
blobs it dedupes against (review17a's strict xfail "right size, other bytes") would add.
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
    from datahub.errors import ObjectChanged
    from datahub.storage import StoreRegistry
    from datahub.workspaces import commit_workspace
    from datahub.writeback import open_workspace

    with tempfile.TemporaryDirectory(dir=spec["scratch"]) as tmp:
        overrides: dict = {"home": f"{tmp}/var", "cache": {"flush_interval": 3600}}
        target = None
        if spec["store"] == "s3":
            overrides.update(spec["s3"])
            overrides["objects_url"] = f"s3://{spec['blobs_bucket']}/objects"
            target = f"s3://{spec['origin_bucket']}/out"
        config = load_config(env={}, overrides=overrides)
        stores = StoreRegistry(config)
        catalog = open_catalog(f"sqlite:///{tmp}/catalog.db")
        ws = open_workspace("ws", config, stores, background=False, target_url=target)
        for d in range(20):
            ws.mkdir(f"d{d}")
        for n in range(spec["files"]):
            with ws.open(f"d{n % 20}/f{n}", create=True) as fh:
                fh.write(0, _content(n, spec.get("size")))
        ws.flush()
        if spec.get("dedupe"):
            commit_workspace(ws, catalog, "stored-first")  # every blob stored before the timed commit
        print("committing", flush=True)  # the parent counts requests from here
        cpu, wall = time.process_time(), time.monotonic()
        version = commit_workspace(ws, catalog, "bench")
        cpu, wall = time.process_time() - cpu, time.monotonic() - wall
        verify = _verify(stores, catalog.list_records("bench", version.seq)) if spec.get("dedupe") else {}
        print("checking", flush=True)  # the parent stops counting here
        unreadable = 0
        for record in catalog.list_records("bench", version.seq):
            store, key = stores.for_url(record.url)
            try:
                store.read(key, etag=record.etag)
            except ObjectChanged:
                unreadable += 1
        ws.close()
        catalog.close()
        stores.close()
    return {
        "datahub": os.path.dirname(datahub.__file__),
        "files": spec["files"],
        "cpu_ms_per_file": round(1000 * cpu / spec["files"], 3),
        "wall_s": round(wall, 2),
        "unreadable": unreadable,
        **verify,
    }


def _content(n: int, size: int | None) -> bytes:
    if size is None:
        return f"file {n} of a pin benchmark\n".encode() * (40 + n % 40)
    import random

    return random.Random(n).randbytes(size)


def _verify(stores, records) -> dict:
    """Read back and hash every stored blob the commit deduped against (what a verified dedupe
    would add), timed on its own: process CPU per file and wall time."""
    import hashlib

    records = list(records)
    print("verifying", flush=True)  # the parent counts these requests apart
    cpu, wall = time.process_time(), time.monotonic()
    for record in records:
        store, key = stores.for_url(record.url)
        check = hashlib.sha256()
        for piece in store.read_chunks(key, etag=record.etag):
            check.update(piece)
        assert f"sha256:{check.hexdigest()}" == record.checksum, record.key
    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    return {"verify_cpu_ms_per_file": round(1000 * cpu / len(records), 3), "verify_wall_s": round(wall, 2)}


def _run(tree: Path, spec: dict, moto) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, "-P", str(Path(__file__).resolve()), "--child", json.dumps(spec)]
    proc = subprocess.Popen(cmd, env=env, cwd=tree, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    marks: dict[str, int] = {}
    lines = []
    for line in proc.stdout:
        if line.strip() in ("committing", "verifying", "checking") and moto is not None:
            marks[line.strip()] = moto.log_size()
        lines.append(line)
    if proc.wait() != 0:
        raise SystemExit(f"the child in {tree} failed")
    result = json.loads(lines[-1])
    if Path(result["datahub"]) != tree / "datahub":  # checked, not assumed
        raise SystemExit(f"the child in {tree} imported datahub from {result['datahub']}")
    result["datahub"] = "its own tree"  # (no absolute path in a recorded output)
    if moto is not None:
        spans = {"": ("committing", "verifying" if "verifying" in marks else "checking")}
        if "verifying" in marks:
            spans["verify_"] = ("verifying", "checking")
        for prefix, (start, stop) in spans.items():
            for name in ("origin_bucket", "blobs_bucket"):
                sent = [collections.Counter(m for m, _p, _s in moto.answered(spec[name], since=marks[mark]))
                        for mark in (start, stop)]  # fmt: skip
                result[f"{prefix}{name.split('_')[0]}_requests"] = dict(sorted((sent[0] - sent[1]).items()))
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("base_tree", nargs="?", help="another checkout of the repository (the base)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--stores", default="local,s3")
    ap.add_argument("--scratch", default="/var/tmp")
    ap.add_argument("--size", type=int, default=None, help="bytes per file (random); default 1-2 KB of text")
    ap.add_argument("--dedupe", action="store_true", help="blobs stored first; time reading them back too")
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
    results: dict[tuple[str, str], list[dict]] = collections.defaultdict(list)
    try:
        for r in range(args.rounds):
            order = ["base", "head"] if r % 2 == 0 else ["head", "base"]
            print(f"round {r + 1}: {_load()}", flush=True)
            for store in args.stores.split(","):
                for name in order:
                    spec = {"store": store, "files": args.files, "scratch": args.scratch,
                            "size": args.size, "dedupe": args.dedupe}  # fmt: skip
                    if moto is not None:
                        spec["s3"] = moto.endpoint.s3_config_overrides()
                        spec["origin_bucket"] = moto.endpoint.new_bucket("origin")
                        spec["blobs_bucket"] = moto.endpoint.new_bucket("blobs")
                    result = _run(trees[name], spec, moto if store == "s3" else None)
                    results[(store, name)].append(result)
                    print(f"  {store} {name}: {json.dumps(result)}", flush=True)
            print(f"  after: {_load()}", flush=True)
    finally:
        if moto is not None:
            moto.stop()
    for (store, name), rows in sorted(results.items()):
        print(
            f"{store} {name}: median CPU ms per file {statistics.median(r['cpu_ms_per_file'] for r in rows)}, "
            f"median wall s {statistics.median(r['wall_s'] for r in rows)}, "
            f"unreadable records {[r['unreadable'] for r in rows]}"
            + (f", verify: median CPU ms per file {statistics.median(r['verify_cpu_ms_per_file'] for r in rows)}, "
               f"median wall s {statistics.median(r['verify_wall_s'] for r in rows)}" if args.dedupe else "")
        )  # fmt: skip


if __name__ == "__main__":
    main()
