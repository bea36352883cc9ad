"""What the shared log (nodeloss20) costs per acknowledging change, with and without it in one run.

    .venv/bin/python bench/writeback/shared_log_cost.py [--files 200] [--size 102400] [--rounds 4]
        [--ceph-env DIR/env.sh --tier rados|rgw] [--threads 1]

Opens a workspace on a local shared tier (packs, the default) through the ``Workspace`` API
and, per round, for each variant in turn (alternating which goes first): writes ``--files``
new files of ``--size`` bytes (each closed: covered first commits, no log record waited for),
overwrites each once (open, rewrite, close: an LMDB transaction whose record must land first),
and renames each once. Variant ``log`` is the code as it is; ``nolog`` is the same workspace
with the journal's shipper taken away (what the journal did before nodeloss20). Printed per
round and as medians: wall per operation and the process's CPU (user + system, every thread)
per operation, with the load average. The machine is shared: compare CPU per operation first.

With ``--ceph-env`` (a cluster from scripts/ceph-dev/ceph-up.sh) the shared tier is on Ceph
instead: ``--tier rados`` a RADOS pool (a log record is one write op, a new small file's first
commit is covered by its chunk's xattr), ``--tier rgw`` an RGW bucket (a record is one PUT, and a
new file's first commit is not covered: it waits for its record). ``--threads N``: N callers at
once (the journal's group commit shares one record among them). Issue 41 item 2 (ceph41).
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from datahub.config import load_config
from datahub.storage import StoreRegistry
from datahub.writeback import open_workspace


def cpu() -> float:
    t = os.times()
    return t.user + t.system


THREADS = 1  # ``--threads``


def timed(fn, n: int) -> tuple[float, float]:
    """(wall ms, CPU ms) per operation of ``fn`` run ``n`` times (by ``THREADS`` callers)."""
    w0, c0 = time.perf_counter(), cpu()
    if THREADS == 1:
        for i in range(n):
            fn(i)
    else:
        with ThreadPoolExecutor(THREADS) as pool:
            list(pool.map(fn, range(n)))
    return (time.perf_counter() - w0) * 1000 / n, (cpu() - c0) * 1000 / n


def ceph_tier(env_file: str, tier: str) -> tuple[dict, object]:
    """Config overrides putting the shared tier on the cluster of ``env_file``, and a cleanup."""
    env = {}
    for line in Path(env_file).read_text().splitlines():
        if line.startswith("export "):
            name, _, value = line[len("export ") :].partition("=")
            env[name] = shlex.split(value)[0] if value else ""
    tag = f"shared-log-cost-{uuid.uuid4().hex[:8]}"
    if tier == "rados":
        os.environ["CEPH_CONF"] = env["CEPH_CONF"]
        sys.path.insert(0, env["CEPH_PYLIB"])
        import rados

        def cleanup() -> None:
            cluster = rados.Rados(conffile=env["CEPH_CONF"])
            cluster.connect()
            ioctx = cluster.open_ioctx(env["CEPH_POOL"])
            for obj in list(ioctx.list_objects()):
                if obj.key.startswith(tag + "/"):
                    ioctx.remove_object(obj.key)
            cluster.shutdown()

        return {"cache": {"shared_url": f"rados://{env['CEPH_POOL']}/{tag}"}}, cleanup
    import boto3

    client = boto3.client(
        "s3", endpoint_url=env["CEPH_RGW_ENDPOINT"], aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1",
    )  # fmt: skip
    client.create_bucket(Bucket=tag)

    def remove() -> None:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=tag):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                client.delete_objects(Bucket=tag, Delete={"Objects": keys, "Quiet": True})
        client.delete_bucket(Bucket=tag)

    s3 = {"endpoint_url": env["CEPH_RGW_ENDPOINT"], "access_key_id": env["AWS_ACCESS_KEY_ID"],
          "secret_access_key": env["AWS_SECRET_ACCESS_KEY"], "region": "us-east-1", "path_style": True}  # fmt: skip
    return {"s3": s3, "cache": {"shared_url": f"s3://{tag}/shared"}}, remove


def run(ws, prefix: str, files: int, data: bytes) -> dict[str, tuple[float, float]]:
    def create(i: int) -> None:
        with ws.open(f"{prefix}/f{i}", create=True) as fh:
            fh.write(0, data)

    def overwrite(i: int) -> None:
        with ws.open(f"{prefix}/f{i}", truncate=True) as fh:
            fh.write(0, data[::-1])

    def rename(i: int) -> None:
        ws.rename(f"{prefix}/f{i}", f"{prefix}/g{i}")

    ws.mkdir(prefix)
    return {"new": timed(create, files), "overwrite": timed(overwrite, files), "rename": timed(rename, files)}


def checkpoint(ws, files: int, size: int) -> None:
    """Time the checkpoint an open writes, at ``files`` files (created here, deferred commits)."""
    ws.mkdir("many")
    for i in range(files):
        with ws.open(f"many/{i}", create=True) as fh:
            fh.write(0, b"x" * min(size, 1000))
    ws.journal.settle_deferred()
    rows = sum(1 for _ in ws.listdir("many")) + 1
    for _ in range(3):
        w0, c0 = time.perf_counter(), cpu()
        ws.journal.shipper.resync()
        print(
            f"checkpoint of {rows} namespace entries (+ as many file records): "
            f"{time.perf_counter() - w0:.3f} s wall, {cpu() - c0:.3f} s CPU, load {os.getloadavg()}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--size", type=int, default=102400)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument(
        "--checkpoint", type=int, default=0, metavar="N",
        help="also time the open's checkpoint (``SharedLog.resync``) of a workspace of N small files",
    )  # fmt: skip
    parser.add_argument("--ceph-env", help="env.sh of a running Ceph: the shared tier there (``--tier``)")
    parser.add_argument("--tier", default="rados", choices=("rados", "rgw"))
    parser.add_argument("--threads", type=int, default=1, help="callers at once")
    args = parser.parse_args()
    global THREADS
    THREADS = args.threads
    data = os.urandom(args.size)
    ceph, cleanup = ceph_tier(args.ceph_env, args.tier) if args.ceph_env else ({}, lambda: None)
    results: dict[str, dict[str, list[tuple[float, float]]]] = {"log": {}, "nolog": {}}
    with tempfile.TemporaryDirectory(prefix="shared-log-cost-") as tmp:
        cache = {
            "flush_interval": 3600,
            "shared_url": Path(f"{tmp}/shared").as_uri(),
            **ceph.get("cache", {}),
        }
        overrides = {"home": f"{tmp}/home", "objects_url": Path(f"{tmp}/objects").as_uri(), "cache": cache}
        if "s3" in ceph:
            overrides["s3"] = ceph["s3"]
        config = load_config(env={}, overrides=overrides)
        stores = StoreRegistry(config)
        ws = open_workspace("bench", config, stores)
        shipper, fence = ws.journal.shipper, ws.journal.fence
        try:
            for r in range(args.rounds):
                order = ["log", "nolog"] if r % 2 == 0 else ["nolog", "log"]
                print(f"round {r + 1}: load {os.getloadavg()}")
                for variant in order:
                    ws.journal.shipper = shipper if variant == "log" else None
                    ws.journal.fence = fence if variant == "log" else (lambda doing: None)  # no lease here
                    out = run(ws, f"r{r}-{variant}", args.files, data)
                    ws.journal.settle_deferred()
                    for op, (wall, c) in out.items():
                        results[variant].setdefault(op, []).append((wall, c))
                        print(f"  {variant:5} {op:9}: {wall:6.3f} ms wall, {c:6.3f} ms CPU per op")
            ws.journal.shipper, ws.journal.fence = shipper, fence
            if args.checkpoint:
                checkpoint(ws, args.checkpoint, args.size)
        finally:
            ws.abandon()
            stores.close()
            cleanup()
    where = f"{args.tier} on Ceph" if args.ceph_env else "a local shared tier"
    print(
        f"medians over {args.rounds} rounds ({args.files} files of {args.size} bytes, {where}, "
        f"{args.threads} caller(s)), load {os.getloadavg()}:"
    )
    for op in ("new", "overwrite", "rename"):
        row = []
        for variant in ("nolog", "log"):
            walls = [w for w, _ in results[variant][op]]
            cpus = [c for _, c in results[variant][op]]
            row.append(
                f"{variant} {statistics.median(walls):.3f} ms wall / {statistics.median(cpus):.3f} ms CPU"
            )
        print(f"  {op:9}: " + "  vs  ".join(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
