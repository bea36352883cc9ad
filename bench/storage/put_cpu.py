"""Client CPU of a shared tier's puts on Ceph (RADOS, RGW): this tree against another, in turns.

    .venv/bin/python bench/storage/put_cpu.py --ceph-env DIR/env.sh [--base-tree DIR]
        [--tier rados,rgw] [--rounds 4] [--big-reps 30] [--small-reps 300] [--files 300]

Why: a write-back workspace whose shared tier is on Ceph stores every chunk with the
store's ``put`` (a staged file's 4 MiB chunks as a ``RangeReader`` over the staged file,
small files' chunks as bytes), and on a 2-core node shared with the Ceph daemons the
daemon's CPU per put bounds how fast a mount can push (issue 41, item 2). Measured in one
process per tree and tier (``time.process_time``, the client libraries' threads included):

- a 4 MiB range of a local file put through a ``RangeReader`` (ms of CPU per MiB) and
  100 KB of bytes (ms per put), with ``RadosStore`` / ``S3Store``;
- the same bytes from a plain client, the baseline: librados ``write_full`` on an I/O
  context, or a default boto3 client's ``put_object``;
- ``--files`` new 100 KB files closed through the ``Workspace`` API with the shared tier on
  that store (CPU per file and median close: what a mount's FLUSH does, without FUSE).

With ``--base-tree`` the trees take turns, each round in the other order, and ``uptime`` is
printed before and after: CPU is the figure to compare on a loaded machine, not wall time.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = """
import json, os, statistics, sys, tempfile, time
sys.path.insert(0, os.environ["CEPH_PYLIB"])
from datahub.config import load_config
from datahub.storage import StoreRegistry, open_store
from datahub.writeback import open_workspace
from datahub.writeback.chunks import RangeReader
tier, big_reps, small_reps, files, scratch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
fd = os.open(scratch, os.O_TMPFILE | os.O_RDWR)
os.pwrite(fd, os.urandom(4 << 20), 0)
big, small = os.pread(fd, 4 << 20, 0), os.urandom(100_000)
tag = f"bench-put-{os.getpid()}"
overrides = {"home": tempfile.mkdtemp(dir=scratch), "cache": {"flush_interval": 3600}}
if tier == "rados":
    root = f"rados://{os.environ['CEPH_POOL']}/{tag}"
    import rados
    cluster = rados.Rados(conffile=os.environ["CEPH_CONF"])
    cluster.connect()
    ioctx = cluster.open_ioctx(os.environ["CEPH_POOL"])
    plain = lambda key, data: ioctx.write_full(f"{tag}/plain/{key}", data)
else:
    bucket = os.environ["BENCH_BUCKET"]
    root = f"s3://{bucket}/{tag}"
    overrides["s3"] = {"endpoint_url": os.environ["CEPH_RGW_ENDPOINT"], "access_key_id": os.environ["AWS_ACCESS_KEY_ID"],
                       "secret_access_key": os.environ["AWS_SECRET_ACCESS_KEY"], "region": "us-east-1", "path_style": True}
    import boto3
    client = boto3.client("s3", endpoint_url=os.environ["CEPH_RGW_ENDPOINT"], region_name="us-east-1")
    plain = lambda key, data: client.put_object(Bucket=bucket, Key=f"{tag}/plain/{key}", Body=data)
config = load_config(env={}, overrides=overrides)
store = open_store(root, config)
def cpu(fn, reps):
    fn()
    t = time.process_time()
    for _ in range(reps):
        fn()
    return (time.process_time() - t) / reps * 1000
out = {
    "put 4 MiB staged range, ms/MiB": cpu(lambda: store.put("x", RangeReader(fd, 0, 4 << 20), size=4 << 20), big_reps) / 4,
    "put 100 KB, ms/put": cpu(lambda: store.put("y", small), small_reps),
    "plain client 4 MiB, ms/MiB": cpu(lambda: plain("z", big), big_reps) / 4,
    "plain client 100 KB, ms/put": cpu(lambda: plain("z", small), small_reps),
}
for key in ("x", "y", "plain/z"):
    store.delete(key)
store.close()
if files:
    overrides["cache"]["shared_url"] = f"{root}/ws"
    config = load_config(env={}, overrides=overrides)
    stores = StoreRegistry(config)
    ws = open_workspace("ws", config, stores)
    closes, t = [], time.process_time()
    for i in range(files):
        fh = ws.open(f"f{i}", create=True, truncate=True)
        fh.write(0, small)
        start = time.perf_counter()
        fh.close()
        closes.append(time.perf_counter() - start)
    out["Workspace API 100 KB, CPU ms/file"] = (time.process_time() - t) / files * 1000
    out["Workspace API 100 KB, median close ms"] = statistics.median(closes) * 1000
    for path, _ in ws.listdir(""):
        ws.unlink(path)
    ws.flush()
    ws.close()
    stores.close()
print(json.dumps({k: round(v, 3) for k, v in out.items()}))
"""


def load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def ceph_env(path: str) -> dict[str, str]:
    env = dict(os.environ)
    for line in Path(path).read_text().splitlines():
        if line.startswith("export "):
            name, _, value = line[len("export ") :].partition("=")
            env[name] = value.strip("'\"")
    return env


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--ceph-env", required=True, help="env.sh of a running Ceph (scripts/ceph-dev/ceph-up.sh)"
    )
    ap.add_argument("--base-tree", help="another checkout of the repository, measured in turns")
    ap.add_argument("--tier", default="rados,rgw", help="rados, rgw or both (comma-separated)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--big-reps", type=int, default=30)
    ap.add_argument("--small-reps", type=int, default=300)
    ap.add_argument(
        "--files", type=int, default=300, help="100 KB files closed through the Workspace API (0: none)"
    )
    args = ap.parse_args()
    env = ceph_env(args.ceph_env)
    trees = {"head": REPO}
    if args.base_tree:
        trees = {"base": Path(args.base_tree).resolve(), "head": REPO}
    tiers = args.tier.split(",")
    client = None
    if "rgw" in tiers:
        import boto3

        env["BENCH_BUCKET"] = f"bench-put-{uuid.uuid4().hex[:8]}"
        client = boto3.client(
            "s3", endpoint_url=env["CEPH_RGW_ENDPOINT"], aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1",
        )  # fmt: skip
        client.create_bucket(Bucket=env["BENCH_BUCKET"])
    scratch = tempfile.mkdtemp(prefix="put-cpu-", dir="/var/tmp")
    print(f"# load before: {load()}", flush=True)
    try:
        for r in range(args.rounds):
            order = list(trees.items())
            for tier in tiers:
                for name, tree in order[::-1] if r % 2 else order:
                    cmd = [sys.executable, "-c", SCRIPT, tier, str(args.big_reps), str(args.small_reps),
                           str(args.files), scratch]  # fmt: skip
                    out = subprocess.run(
                        cmd, cwd=tree, env=env, capture_output=True, text=True, check=True
                    ).stdout
                    print(f"round {r + 1} {tier} {name}: {out.strip()}", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if client is not None:
            bucket = env["BENCH_BUCKET"]
            for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
                for obj in page.get("Contents", []):
                    client.delete_object(Bucket=bucket, Key=obj["Key"])
            client.delete_bucket(Bucket=bucket)
    print(f"# load after: {load()}")


if __name__ == "__main__":
    main()
