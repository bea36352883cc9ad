"""Client CPU of a RADOS stat of objects an older put left with an md5 etag: this tree against another.

    .venv/bin/python bench/storage/rados_legacy_stat.py --ceph-env DIR/env.sh [--base-tree DIR]
        [--rounds 4] [--objects 40] [--sizes 100000,4194304]

Why (review20a): such an object's md5 names it only once a whole read of its current version
hashed to it (``RadosStore._legacy_holds``); before, the size alone was checked, and a
same-size rewrite by another tool kept the md5. That costs one whole read and an md5 per
object, once per store and object version. Measured in one process per tree, for each size
(``time.process_time``, librados' threads included; ms of CPU per stat):

- ``version``: objects put by this store (etag = object version): the baseline, unchanged;
- ``legacy first``: objects with an older put's ``<md5> <size>`` xattr, first stat by a
  fresh store (the read and md5 here, nothing before);
- ``legacy again``: the same objects stat'ed again by that store (remembered).

With ``--base-tree`` the trees take turns, each round in the other order; ``uptime`` before
and after: CPU is the figure to compare on a loaded machine.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from bench.storage.put_cpu import ceph_env, load  # noqa: E402

SCRIPT = """
import hashlib, json, os, sys, tempfile, time, uuid
sys.path.insert(0, os.environ["CEPH_PYLIB"])
import rados
from datahub.config import load_config
from datahub.storage import open_store
n, sizes = int(sys.argv[1]), [int(s) for s in sys.argv[2].split(",")]
tag = f"bench-legacy-{uuid.uuid4().hex[:8]}"
root = f"rados://{os.environ['CEPH_POOL']}/{tag}"
config = load_config(env={}, overrides={"home": tempfile.mkdtemp()})
cluster = rados.Rados(conffile=os.environ["CEPH_CONF"])
cluster.connect()
ioctx = cluster.open_ioctx(os.environ["CEPH_POOL"])
out = {}
def cpu_per(fn, keys):
    t = time.process_time()
    for key in keys:
        fn(key)
    return (time.process_time() - t) / len(keys) * 1000
for size in sizes:
    data = os.urandom(size)
    md5 = hashlib.md5(data).hexdigest()
    writer = open_store(root, config)
    new = [f"v{size}/{i}" for i in range(n)]
    old = [f"l{size}/{i}" for i in range(n)]
    for key in new:
        writer.put(key, data)
    for key in old:
        ioctx.write_full(f"{tag}/{key}", data)
        ioctx.set_xattr(f"{tag}/{key}", "datahub.etag", f"{md5} {size}".encode())
    store = open_store(root, config)
    store.stat(new[0])  # connected
    out[f"{size} B version, ms/stat"] = cpu_per(store.stat, new)
    assert all(store.stat(key).etag == md5 for key in old[:1])
    out[f"{size} B legacy first, ms/stat"] = cpu_per(store.stat, old[1:])
    out[f"{size} B legacy again, ms/stat"] = cpu_per(store.stat, old[1:])
    for key in new + old:
        writer.delete(key)
    store.close()
    writer.close()
ioctx.close()
cluster.shutdown()
print(json.dumps({k: round(v, 3) for k, v in out.items()}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--ceph-env", required=True, help="env.sh of a running Ceph (scripts/ceph-dev/ceph-up.sh)"
    )
    ap.add_argument("--base-tree", help="another checkout of the repository, measured in turns")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--objects", type=int, default=40)
    ap.add_argument("--sizes", default="100000,4194304")
    args = ap.parse_args()
    env = ceph_env(args.ceph_env)
    trees = {"head": REPO}
    if args.base_tree:
        trees = {"base": Path(args.base_tree).resolve(), "head": REPO}
    print(f"# load before: {load()}", flush=True)
    for r in range(args.rounds):
        order = list(trees.items())
        for name, tree in order[::-1] if r % 2 else order:
            cmd = [sys.executable, "-c", SCRIPT, str(args.objects), args.sizes]
            out = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, check=True).stdout
            print(f"round {r + 1} {name}: {out.strip()}", flush=True)
    print(f"# load after: {load()}")


if __name__ == "__main__":
    main()
