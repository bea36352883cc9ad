"""CPU per small file's close in the write-back core alone, two source trees in turns (no mount).

    .venv/bin/python bench/writeback/close_cpu_ab.py BASE_TREE [--rounds 6] [--files 2000]
        [--size 102400]

Issue 41 (small41c). ``tree_ab.py`` measures the mount, where the daemon's CPU per file is
counted in 10 ms clock ticks and the FUSE request path's share swings with the load; this
measures what a change of the write-back's Python saves, apart from FUSE: each round runs, in
a fresh process per tree (alternating which goes first), ``--files`` new files of ``--size``
bytes written with ``Workspace.open(create=True)`` / ``write`` / close on a local shared tier
with packs (each close durable and journaled, a covered first commit), and prints the
process's CPU (user + system, every thread: ``time.process_time``, not clock ticks) and wall per file. ``BASE_TREE``
is another checkout (``git archive BASE | tar -x -C DIR``); this tree is "head". CPU per file
is the figure on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

ONE = r"""
import json, os, sys, tempfile, time, uuid
from datahub.config import load_config
from datahub.storage import StoreRegistry
from datahub.writeback import open_workspace
files, size = int(sys.argv[1]), int(sys.argv[2])
home = tempfile.mkdtemp(prefix="close-cpu-", dir=sys.argv[3])
config = load_config(env={}, overrides={"home": home, "cache": {"flush_interval": 3600}})
stores = StoreRegistry(config)
ws = open_workspace("bench-" + uuid.uuid4().hex[:6], config, stores)
data = bytes(range(256)) * (size // 256) + bytes(size % 256)
def write(name):
    with ws.open(name, create=True) as fh:
        fh.write(0, data)
for i in range(50):
    write(f"warm{i}")
t0, c0 = time.perf_counter(), time.process_time()
for i in range(files):
    write(f"f{i}")
t1, c1 = time.perf_counter(), time.process_time()
ws.abandon()
stores.close()
cpu = c1 - c0
print(json.dumps({"cpu_ms": cpu / files * 1e3, "wall_ms": (t1 - t0) / files * 1e3,
                  "datahub": os.path.dirname(__import__("datahub").__file__)}))
"""


def run(tree: Path, files: int, size: int, where: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", ONE, str(files), str(size), where],
        cwd=tree, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("base_tree")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--size", type=int, default=102400)
    args = ap.parse_args()
    trees = {"base": Path(args.base_tree).resolve(), "head": REPO}
    got: dict[str, list[dict]] = {"base": [], "head": []}
    load = lambda: subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()  # noqa: E731
    with tempfile.TemporaryDirectory(prefix="close-cpu-ab-") as where:
        for r in range(args.rounds):
            order = ["base", "head"] if r % 2 == 0 else ["head", "base"]
            print(f"round {r + 1}: {load()}", flush=True)
            for name in order:
                m = run(trees[name], args.files, args.size, where)
                got[name].append(m)
                print(
                    f"  {name}: CPU {m['cpu_ms']:.3f} ms/file, wall {m['wall_ms']:.3f} ms/file ({m['datahub']})"
                )
    print(
        f"{args.files} x {args.size:,} B closes in-process, medians of {args.rounds} rounds (base -> head):"
    )
    for key in ("cpu_ms", "wall_ms"):
        b = statistics.median(m[key] for m in got["base"])
        h = statistics.median(m[key] for m in got["head"])
        wins = sum(mh[key] < mb[key] for mb, mh in zip(got["base"], got["head"], strict=True))
        print(f"  {key}: {b:.3f} -> {h:.3f} ({h / b:.2f}x), head lower in {wins} of {args.rounds} rounds")
    print(f"load after: {load()}")


if __name__ == "__main__":
    main()
