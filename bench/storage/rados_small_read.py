"""What a per-process RADOS handle costs per small read: this tree against another.

    .venv/bin/python bench/storage/rados_small_read.py --ceph-env DIR/env.sh [--base-tree DIR]
        [--rounds 3] [--reads 2000] [--lookups 200000]

Why (fork28): every op of a rados:// store now finds its process's session (cluster handle,
I/O contexts) through ``procs.PerProcess``, one ``os.getpid()`` more per op, so a forked
child never uses its parent's librados handle. Measured in one process per tree:

- ``lookup``: ``RadosStore._ioctx()`` alone (this thread's I/O context, already open), the
  only code every op goes through that changed: CPU-µs per call, best of 5 runs;
- ``read``: ``store.read(key, 0, 4096)`` of one 4 KiB object (one librados read): wall-µs
  and CPU-µs (``time.process_time``, librados' threads included) per read, best of 3.

With ``--base-tree`` the trees take turns, each round in the other order; ``uptime`` before
and after: a small read is a round trip to the OSD, so its wall time on a loaded machine
spreads far more than the lookup's difference.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from bench.storage.put_cpu import ceph_env, load  # noqa: E402

SCRIPT = """
import json, os, sys, tempfile, time, uuid
sys.path.insert(0, os.environ["CEPH_PYLIB"])
from datahub.config import load_config
from datahub.storage import open_store
reads, lookups = int(sys.argv[1]), int(sys.argv[2])
config = load_config(env={}, overrides={"home": tempfile.mkdtemp()})
store = open_store(f"rados://{os.environ['CEPH_POOL']}/bench-small-{uuid.uuid4().hex[:8]}", config)
store.put("k", os.urandom(4096))
store.read("k", 0, 4096)
best_lookup = float("inf")
for _ in range(5):
    t = time.process_time()
    for _ in range(lookups):
        store._ioctx()
    best_lookup = min(best_lookup, (time.process_time() - t) / lookups * 1e6)
best_wall = best_cpu = float("inf")
for _ in range(3):
    w, c = time.perf_counter(), time.process_time()
    for _ in range(reads):
        store.read("k", 0, 4096)
    best_wall = min(best_wall, (time.perf_counter() - w) / reads * 1e6)
    best_cpu = min(best_cpu, (time.process_time() - c) / reads * 1e6)
store.delete("k")
store.close()
print(json.dumps({"lookup_cpu_us": best_lookup, "read_wall_us": best_wall, "read_cpu_us": best_cpu}))
"""


def run(tree: Path, env: dict[str, str], reads: int, lookups: int) -> dict[str, float]:
    out = subprocess.run(
        ["nice", sys.executable, "-c", SCRIPT, str(reads), str(lookups)],
        env={**env, "PYTHONPATH": str(tree)},
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--ceph-env", required=True, help="env.sh of a running Ceph (scripts/ceph-dev/ceph-up.sh)"
    )
    ap.add_argument("--base-tree", help="another checkout of the repository, measured in turns")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reads", type=int, default=2000)
    ap.add_argument("--lookups", type=int, default=200_000)
    args = ap.parse_args()
    env = ceph_env(args.ceph_env)
    trees = [("this", REPO)] + ([("base", Path(args.base_tree))] if args.base_tree else [])
    print("before:", load())
    for round_ in range(args.rounds):
        for name, tree in trees if round_ % 2 == 0 else trees[::-1]:
            r = run(tree, env, args.reads, args.lookups)
            print(
                f"round {round_ + 1} {name}: lookup {r['lookup_cpu_us']:.3f} CPU-us, "
                f"4 KiB read {r['read_wall_us']:.0f} wall-us / {r['read_cpu_us']:.0f} CPU-us",
                flush=True,
            )
    print("after:", load())


if __name__ == "__main__":
    main()
