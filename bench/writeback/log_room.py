"""What the room a local tier's shared log keeps for the next open's checkpoint (lognext21)
costs: blocks on the shared tier, CPU per logged change, and the open; BASE and HEAD in one run.

    .venv/bin/python bench/writeback/log_room.py BASE [--files 2000] [--size 4096] [--rounds 3]

BASE: a source tree of the base commit (``git archive <commit> | tar -x -C BASE``); HEAD: this
tree. Per round, for each tree in turn (alternating which goes first), a fresh process opens a
workspace on a local shared tier (one file per chunk) through the ``Workspace`` API, creates
``--files`` files of ``--size`` bytes, overwrites each once and renames each once (each an
LMDB transaction with a log record), closes, and opens it again. Printed: CPU (user + system,
every thread) and wall per overwrite and per rename, the log's bytes and blocks at the close
(every base of the journal's log), and the reopen's CPU and wall. The machine is shared:
compare CPU and blocks; walls are noise.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HEAD = Path(__file__).resolve().parents[2]

CHILD = r"""
import json, os, sys, tempfile, time
from pathlib import Path
from datahub.config import load_config
from datahub.storage import StoreRegistry
from datahub.writeback import open_workspace

files, size = int(sys.argv[1]), int(sys.argv[2])
tmp = Path(tempfile.mkdtemp(prefix="lognext21-bench-"))
config = load_config(env={}, overrides={"home": str(tmp / "home"), "objects_url": (tmp / "objects").as_uri(),
    "cache": {"shared_url": (tmp / "tier").as_uri(), "writeback_pack_bytes": 0, "flush_interval": 3600}})
stores = StoreRegistry(config)

def cpu():
    t = os.times()
    return t.user + t.system

def timed(fn):
    w, c = time.perf_counter(), cpu()
    for i in range(files):
        fn(i)
    return (time.perf_counter() - w) * 1000 / files, (cpu() - c) * 1000 / files

ws = open_workspace("bench", config, stores, background=False)
data = os.urandom(size)
ws.mkdir("d")
def create(i):
    with ws.open(f"d/f{i}", create=True) as fh:
        fh.write(0, data)
def overwrite(i):
    with ws.open(f"d/f{i}", truncate=True) as fh:
        fh.write(0, data[::-1])
def rename(i):
    ws.rename(f"d/f{i}", f"d/g{i}")
timed(create)
over, ren = timed(overwrite), timed(rename)
ws.close()
logs = [p for p in (tmp / "tier" / "writeback-log").rglob("*") if p.is_file()]
nbytes = sum(p.stat().st_size for p in logs)
blocks = sum(p.stat().st_blocks * 512 for p in logs)
w, c = time.perf_counter(), cpu()
ws = open_workspace("bench", config, stores, background=False)
reopen = ((time.perf_counter() - w) * 1000, (cpu() - c) * 1000)
ws.close()
print(json.dumps({"overwrite": over, "rename": ren, "log_bytes": nbytes, "log_blocks": blocks, "reopen": reopen}))
import shutil; shutil.rmtree(tmp)
"""


def one(tree: Path, files: int, size: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(files), str(size)],
        cwd=tempfile.gettempdir(), env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("base", type=Path)
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, list[dict]] = {"base": [], "head": []}
    for r in range(args.rounds):
        order = [("base", args.base), ("head", HEAD)]
        for name, tree in order if r % 2 == 0 else order[::-1]:
            res = one(tree, args.files, args.size)
            results[name].append(res)
            print(
                f"round {r} {name}: overwrite {res['overwrite'][1]:.3f} ms CPU ({res['overwrite'][0]:.2f} wall), "
                f"rename {res['rename'][1]:.3f} ms CPU ({res['rename'][0]:.2f} wall), log {res['log_bytes']} B "
                f"in {res['log_blocks']} B of blocks, reopen {res['reopen'][1]:.0f} ms CPU "
                f"({res['reopen'][0]:.0f} wall); load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    for name, rows in results.items():
        med = {
            key: statistics.median(row[key][1] if isinstance(row[key], list) else row[key] for row in rows)
            for key in ("overwrite", "rename", "log_bytes", "log_blocks", "reopen")
        }
        print(f"median {name}: {json.dumps(med)}")


if __name__ == "__main__":
    main()
