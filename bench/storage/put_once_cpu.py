"""CPU of the local store's ``put_once`` against its ``put``, new keys, in alternation.

    .venv/bin/python bench/storage/put_once_cpu.py [--blocks 10] [--per-block 200] [--size 1500]
        [--scratch /var/tmp]

pinblobs16. A workspace commit used to store each new blob with ``put`` (temp file, fsync,
a check that no file of equal bytes is there, rename); it now uses ``put_once`` (temp file,
fsync, ``renameat2`` without replacing). Both are timed in one process on one directory,
blocks of ``--per-block`` puts of new keys taking turns (the first of each pair alternates),
``time.process_time`` per put (the system calls' kernel time included); the load average is
printed before and after. The commit benchmark (``bench/writeback/commit_pin.py``) showed a
strong order effect between its child processes on this loaded machine: this one has none
of their fsync backlog between the two.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from datahub.storage.local import LocalStore


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--blocks", type=int, default=10)
    ap.add_argument("--per-block", type=int, default=200)
    ap.add_argument("--size", type=int, default=1500)
    ap.add_argument("--scratch", default="/var/tmp")
    args = ap.parse_args()
    print("before:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    cpu: dict[str, list[float]] = {"put": [], "put_once": []}
    with tempfile.TemporaryDirectory(dir=args.scratch) as tmp:
        store = LocalStore(tmp)
        payload = os.urandom(args.size)
        n = 0
        for block in range(args.blocks):
            order = ["put", "put_once"] if block % 2 == 0 else ["put_once", "put"]
            for name in order:
                method = getattr(store, name)
                start = time.process_time()
                for _ in range(args.per_block):
                    n += 1
                    method(f"blobs/{n % 256:02x}/{n}", payload)
                cpu[name].append(1000 * (time.process_time() - start) / args.per_block)
    print("after:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    for name, rows in cpu.items():
        print(
            f"{name}: CPU ms per put, per block {[round(r, 3) for r in rows]}, median {statistics.median(rows):.3f}"
        )


if __name__ == "__main__":
    main()
