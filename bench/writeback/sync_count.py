"""Flushes per small file through the ``Workspace`` API, by file, base tree against this one.

    .venv/bin/python bench/writeback/sync_count.py BASE_TREE [--files 300] [--size 100000]
        [--threads 1,4,8] [--rounds 2]

Issue 41 (smallsync19). ``BASE_TREE`` is another checkout (``git archive BASE | tar -x -C
DIR``); this tree is "head". Each round runs, for each tree in turn (alternating which goes
first), a process started in that tree which opens a workspace on a local shared tier (packs,
the default) and writes ``--files`` new files of ``--size`` bytes from ``--threads`` threads,
closing each; ``strace -f -y`` counts its ``fdatasync``/``fsync`` calls by the file they
flush: ``pack`` (a pack of the shared tier), ``journal`` (LMDB's data file), other (the
open's own). The process ends without a close (no flush to the origin is counted). The
same files written to a local directory with ``fsync`` (untraced) are the baseline's wall.
Printed per tree and thread count: flushes per file and the traced wall per file (strace
slows every call: compare the walls only side by side). The API path leaves the FUSE request
machinery out, so the counts are the write-back's own; the mount's CPU is ``tree_ab.py``'s.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

WORKER = r"""
import os, sys, threading, time, tempfile
from pathlib import Path
from datahub.config import load_config
from datahub.storage import StoreRegistry
from datahub.writeback import open_workspace
home, files, size, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
config = load_config(env={}, overrides={"home": home, "cache": {"flush_interval": 3600}})
ws = open_workspace("ws", config, StoreRegistry(config))
data = os.urandom(size)
def writer(t):
    for n in range(t, files, threads):
        with ws.open(f"f{n}", create=True) as fh:
            fh.write(0, data)
print("START", flush=True)
t0 = time.perf_counter()
pool = [threading.Thread(target=writer, args=(t,)) for t in range(threads)]
for th in pool: th.start()
for th in pool: th.join()
wall = (time.perf_counter() - t0) / files * 1000
getattr(ws.journal, "settle_deferred", lambda: None)()  # head: the last batch into LMDB
print(f"WALL {wall:.3f}", flush=True)
os._exit(0)  # no close: its flush to the origin is not what is counted
"""

_CALL = re.compile(r"^(?:\[pid\s+\d+\]\s+|\d+\s+)?(fdatasync|fsync)\((\d+)<([^>]*)>")


def run(tree: Path, files: int, size: int, threads: int) -> tuple[dict[str, int], float]:
    home = Path(tempfile.mkdtemp(prefix="sync-count-"))
    trace = home / "trace"
    try:
        out = subprocess.run(
            ["strace", "-f", "-y", "-e", "trace=fdatasync,fsync", "-o", str(trace),
             sys.executable, "-c", WORKER, str(home / "var"), str(files), str(size), str(threads)],
            cwd=tree, capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        lines = trace.read_text().splitlines()
        # the whole process: its open flushes a few times too
        counts: collections.Counter[str] = collections.Counter()
        for line in lines:
            if "write(" in line:
                continue
            match = _CALL.match(line)
            if match is None:
                continue
            path = match.group(3)
            kind = "pack" if "/packs/" in path else "journal" if path.endswith("data.mdb") else "other"
            counts[kind] += 1
        found = re.search(r"WALL ([0-9.]+)", out)
        return dict(counts), float(found.group(1)) if found else float("nan")
    finally:
        shutil.rmtree(home, ignore_errors=True)


def local_fsync(files: int, size: int, threads: int) -> float:
    root = Path(tempfile.mkdtemp(prefix="sync-count-local-"))
    data = os.urandom(size)

    def writer(t: int) -> None:
        for n in range(t, files, threads):
            fd = os.open(root / f"f{n}", os.O_WRONLY | os.O_CREAT, 0o644)
            os.write(fd, data)
            os.fsync(fd)
            os.close(fd)

    t0 = time.perf_counter()
    pool = [threading.Thread(target=writer, args=(t,)) for t in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    wall = (time.perf_counter() - t0) / files * 1000
    shutil.rmtree(root, ignore_errors=True)
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("base_tree")
    ap.add_argument("--files", type=int, default=300)
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--threads", default="1,4,8")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    trees = {"base": Path(args.base_tree).resolve(), "head": REPO}
    for rnd in range(args.rounds):
        print(f"round {rnd + 1}: load {os.getloadavg()}", flush=True)
        for threads in [int(t) for t in args.threads.split(",")]:
            print(
                f"  {threads} writer(s): local write + fsync {local_fsync(args.files, args.size, threads):.2f} ms/file"
            )
            order = list(trees) if rnd % 2 == 0 else list(reversed(trees))
            for name in order:
                counts, wall = run(trees[name], args.files, args.size, threads)
                per = ", ".join(f"{k} {v / args.files:.2f}" for k, v in sorted(counts.items()))
                print(
                    f"    {name}: flushes per file (its open included): {per}; traced wall {wall:.2f} ms/file",
                    flush=True,
                )


if __name__ == "__main__":
    main()
