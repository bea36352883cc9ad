"""Client CPU of ``RadosStore.put``: this tree against another, in turns, and plain librados.

    .venv/bin/python bench/storage/rados_put_cpu.py --ceph-env DIR/env.sh [--base-tree DIR]
        [--rounds 3] [--big-reps 30] [--small-reps 300]

Why: a write-back workspace whose shared tier is a RADOS pool stores every chunk with
``RadosStore.put`` (a staged file's 4 MiB chunks as a ``RangeReader`` over the staged file,
small files' chunks as bytes), and on a 2-core node the daemon's CPU per MiB bounds how fast
a mount can push (issue 41, item 2). Measured in one process per tree (``time.process_time``,
librados' messenger threads included): a 4 MiB range of a local file put through a
``RangeReader`` (ms of CPU per MiB) and 100 KB of bytes (ms per put); ``write_full`` of the
same bytes on a plain I/O context, the floor; and ``--files`` new 100 KB files closed
through the ``Workspace`` API on the pool (CPU per file, median close: what a mount's FLUSH
does, without FUSE). With ``--base-tree`` the trees take turns,
each round in the other order, and ``uptime`` is printed before and after: CPU is the figure
to compare on a loaded machine, not wall time.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MiB = 1024**2
SCRIPT = """
import os, sys, time, json
sys.path.insert(0, os.environ["CEPH_PYLIB"])
from datahub.storage.rados import RadosStore
from datahub.writeback.chunks import RangeReader
big_reps, small_reps, files, scratch = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
fd = os.open(scratch, os.O_TMPFILE | os.O_RDWR)
os.pwrite(fd, os.urandom(4 << 20), 0)
small = os.urandom(100_000)
store = RadosStore(os.environ["CEPH_POOL"], f"bench-put-{os.getpid()}")
def cpu(fn, reps):
    fn()
    t = time.process_time()
    for _ in range(reps):
        fn()
    return (time.process_time() - t) / reps * 1000
out = {
    "staged 4 MiB, ms/MiB": cpu(lambda: store.put("x", RangeReader(fd, 0, 4 << 20), size=4 << 20), big_reps) / 4,
    "bytes 100 KB, ms/put": cpu(lambda: store.put("y", small), small_reps),
}
io = store._ioctx()
data = os.pread(fd, 4 << 20, 0)
out["librados write_full 4 MiB, ms/MiB"] = cpu(lambda: io.write_full(store.prefix + "z", data), big_reps) / 4
out["librados write_full 100 KB, ms/put"] = cpu(lambda: io.write_full(store.prefix + "z", small), small_reps)
for key in ("x", "y", "z"):
    store.delete(key)
store.close()
if files:  # closes of new 100 KB files through the Workspace API, shared tier on the pool
    import statistics, tempfile
    from datahub.config import load_config
    from datahub.storage import StoreRegistry
    from datahub.writeback import open_workspace
    home = tempfile.mkdtemp(dir=scratch)
    shared = f"rados://{os.environ['CEPH_POOL']}/bench-ws-{os.getpid()}"
    config = load_config(env={}, overrides={"home": home, "cache": {"flush_interval": 3600, "shared_url": shared}})
    stores = StoreRegistry(config)
    ws = open_workspace("ws", config, stores)
    closes, t = [], time.process_time()
    for i in range(files):
        fh = ws.open(f"f{i}", create=True, truncate=True)
        fh.write(0, small)
        start = time.perf_counter()
        fh.close()
        closes.append(time.perf_counter() - start)
    out["Workspace API, 100 KB: CPU ms/file"] = (time.process_time() - t) / files * 1000
    out["Workspace API, 100 KB: median close ms"] = statistics.median(closes) * 1000
    for path, _ in ws.listdir(""):
        ws.unlink(path)
    ws.flush()
    ws.close()
    stores.close()
print(json.dumps(out))
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
    ap.add_argument("--rounds", type=int, default=3)
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
    scratch = tempfile.mkdtemp(prefix="rados-put-", dir="/var/tmp")
    print(f"# load before: {load()}", flush=True)
    try:
        for r in range(args.rounds):
            order = list(trees.items())
            for name, tree in order[::-1] if r % 2 else order:
                cmd = [
                    sys.executable,
                    "-c",
                    SCRIPT,
                    str(args.big_reps),
                    str(args.small_reps),
                    str(args.files),
                    scratch,
                ]
                out = subprocess.run(
                    cmd, cwd=tree, env=env, capture_output=True, text=True, check=True
                ).stdout
                print(f"round {r + 1} {name}: {out.strip()}", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"# load after: {load()}")


if __name__ == "__main__":
    main()
