"""What a bucket mount's access check costs (fuse_adapter/bucket_access.py), A/B against a tree
without it, counted at the S3 server.

    .venv/bin/python bench/csi/bucket_access.py --tree base=/var/tmp/base --tree head=. [--files 500] [--rounds 3]

A bucket prefix of ``--files`` objects of 50-200 KB on a moto server on loopback (HTTP/1.1
keep-alive, no IAM: every check is answered, so its request and CPU are what is measured).
Per round, for each tree in turn (the order alternates between rounds): the disk cache
emptied, then

- **cold**: a mount (``datahub mount MNT s3://bucket/data --no-prefetch``, the tree's code)
  reads every file once (8 threads, shuffled): the files go into the node's disk tier;
- **warm**: a second mount of the same prefix (another pod of the node, same cache) reads
  every file twice: the first pass is what the check costs (one 1-byte GET per object), the
  second shows it is remembered.

Printed per phase: GETs of the objects per file (from moto's access log; LISTs are not
counted), the mount process's CPU per file (utime+stime from before the pass to the end
of it), wall seconds (noise on a shared machine) and the load average. First, the check's
request alone, in this process, alternating: a 1-byte GET under If-Match (the storage
layer's lean GET, what the check sends) against a HEAD (boto3's ``head_object``), client
CPU per request over every object.
Needs root (FUSE).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.mount.common import daemon_cpu, load, random_objects, read_py  # noqa: E402
from tests.fuse.conftest import FuseEnv, is_mounted, make_env, upload_dataset, wait_until  # noqa: E402
from tests.servers import MotoServer  # noqa: E402


def gets(moto: MotoServer, bucket: str) -> int:
    """GETs of the objects under ``data/`` moto logged so far."""
    pattern = re.compile(rf"GET /{bucket}/data/\S* HTTP/1\.[01]")  # a 206 line is in colour codes
    return len(pattern.findall(Path(moto.log.name).read_text(errors="replace")))


def mount(env: FuseEnv, tree: Path, mnt: Path) -> subprocess.Popen:
    """``datahub mount MNT s3://bucket/data`` with the code of ``tree``."""
    mnt.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "fuse_adapter", "--config", str(env.config_path)]
    cmd += ["mount", str(mnt), f"s3://{env.bucket}/data", "--no-prefetch", "--foreground"]
    environ = {**os.environ, "PYTHONPATH": str(tree)}
    with open(env.root / f"mount-{mnt.name}.log", "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=log, cwd=tree, env=environ)
    wait_until(lambda: is_mounted(str(mnt)) or proc.poll() is not None, 120)
    if proc.poll() is not None:
        raise SystemExit(f"mount of {tree} exited {proc.returncode}")
    return proc


def read_pass(paths: list[str]) -> float:
    order = paths[:]
    random.shuffle(order)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(read_py, order, chunksize=8))
    return time.perf_counter() - t0


def phase(env: FuseEnv, moto: MotoServer, pid: int, paths: list[str]) -> tuple[float, float, float]:
    """(GETs per file, daemon CPU µs per file, wall seconds) of one read pass."""
    g0, c0 = gets(moto, env.bucket), daemon_cpu(pid)
    wall = read_pass(paths)
    time.sleep(0.5)  # the page stores of the last files
    n = len(paths)
    return (gets(moto, env.bucket) - g0) / n, (daemon_cpu(pid) - c0) / n * 1e6, wall


def settled_pages(disk: Path, want: int, timeout: float = 300.0) -> int:
    """Page files in the disk tier once all ``want`` are there or the count stopped moving for 10 s."""
    deadline, last, since = time.monotonic() + timeout, -1, time.monotonic()
    while True:
        held = sum(1 for _ in disk.rglob("*.page"))
        if held != last:
            last, since = held, time.monotonic()
        if held >= want or time.monotonic() - since > 10 or time.monotonic() > deadline:
            return held
        time.sleep(0.2)


def run_tree(env: FuseEnv, moto: MotoServer, name: str, tree: Path, keys: list[str]) -> list[tuple]:
    disk = env.config.resolved_disk_dir
    shutil.rmtree(disk, ignore_errors=True)
    rows = []
    for role in ("cold", "warm"):
        mnt = env.root / f"{name}-{role}"
        proc = mount(env, tree, mnt)
        try:
            paths = [str(mnt / k) for k in keys]
            read_py(paths.pop())  # the listing is in before the pass is measured (not counted)
            rows.append((name, role, *phase(env, moto, proc.pid, paths)))
            if role == "warm":
                rows.append((name, "warm again", *phase(env, moto, proc.pid, paths)))
            else:
                held = settled_pages(disk, len(keys))
                if held < len(keys):  # a page the disk tier refused is fetched again when warm
                    print(f"{name}: {held} of {len(keys)} files in the disk tier after the cold pass")
        finally:
            env.teardown(mnt, proc)
    return rows


def request_cost(env: FuseEnv, keys: list[str]) -> None:
    """Client CPU per check request: the 1-byte GET the check sends, and a HEAD (A/B, twice)."""
    from datahub.storage import StoreRegistry

    with StoreRegistry(env.config) as stores:
        store = stores.store(f"s3://{env.bucket}/data")
        etags = {info.key: info.etag for info in store.list()}
        for kind in ("1-byte GET", "HEAD", "1-byte GET", "HEAD"):
            c0 = time.process_time()
            for key in keys:
                if kind == "HEAD":
                    store.stat(key)
                else:
                    store.read(key, 0, 1, etag=etags[key])
            print(
                f"check request {kind:10}: {(time.process_time() - c0) / len(keys) * 1e6:5.0f} CPU-µs each  {load()}"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", action="append", required=True, help="NAME=DIR (a source tree), repeatable")
    ap.add_argument("--files", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    trees = [(t.split("=", 1)[0], Path(t.split("=", 1)[1]).resolve()) for t in args.tree]
    objects = random_objects(args.files, 11, 50_000, 200_000)
    tmp = Path(tempfile.mkdtemp(prefix="bucket-access-", dir="/var/tmp"))
    moto = MotoServer(keep_alive=True)
    try:
        env = make_env(tmp / "home", moto.endpoint)
        upload_dataset(env, "objects", objects)  # under s3://bucket/data/
        keys = sorted(objects)
        print(f"{args.files} files of 50-200 KB; {load()}")
        request_cost(env, keys)
        print(f"{'tree':6} {'round':5} {'phase':10} {'GETs/file':>9} {'CPU µs/file':>11} {'wall s':>7}  load")
        for r in range(args.rounds):
            order = trees if r % 2 == 0 else trees[::-1]
            for name, tree in order:
                for row in run_tree(env, moto, name, tree, keys):
                    tree_name, role, per_file, cpu, wall = row
                    print(f"{tree_name:6} {r:5} {role:10} {per_file:9.2f} {cpu:11.0f} {wall:7.2f}  {load()}")
    finally:
        moto.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
