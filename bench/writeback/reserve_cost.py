"""What a staged file's reserved blocks and its watcher cost, without a mount.

    .venv/bin/python bench/writeback/reserve_cost.py [--dir DIR] [--files 2000]

Issue 41, blocker (a): the watcher (``datahub/writeback/modwatch.py``) grows a staged
file's reservation as the kernel writes it. Two questions, on the file system of ``--dir``
(put it on the disk the shared tier uses):

- ``fallocate``: an anonymous file (``O_TMPFILE``) given ``[0, N)`` with
  ``FALLOC_FL_KEEP_SIZE``, then closed (its blocks freed): wall time of each step and CPU
  per file, for N from 1 MiB to 1 GiB. How far ahead can the watcher reserve cheaply?
- ``watcher``: ``--files`` files of 100 KB, each made, written in one call and closed after
  a 0.5 ms pause (the rest of a file's work, so the watcher runs as in a daemon), taking
  turns: ``none`` (no watch), ``add+rm only`` (the watch added and removed, the events on
  another file), ``watched`` (a ``ModifyWatch`` hears each file, its callback ``fstat``\\ s
  it). Printed: the process's CPU per file (all threads). The difference is what the
  watcher costs a small staged file.
CPU per file is the figure; wall time swings with the load of the shared machine
(``uptime`` printed before and after).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from datahub.writeback.modwatch import ModifyWatch

MiB = 1024**2
_libc = ctypes.CDLL(None, use_errno=True)
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def fallocate_costs(directory: str, rounds: int = 20) -> None:
    for mib in (1, 4, 16, 64, 128, 256, 1024):
        c0, alloc, free = cpu(), 0.0, 0.0
        for _ in range(rounds):
            fd = os.open(directory, os.O_TMPFILE | os.O_RDWR, 0o600)
            a = time.perf_counter()
            if _libc.fallocate(fd, 1, 0, mib * MiB) != 0:
                raise OSError(ctypes.get_errno(), "fallocate")
            b = time.perf_counter()
            os.close(fd)
            free += time.perf_counter() - b
            alloc += b - a
        print(f"fallocate {mib:5d} MiB: {alloc / rounds * 1e3:.2f} ms wall, release {free / rounds * 1e3:.2f} "
              f"ms wall, CPU {(cpu() - c0) / rounds * 1e3:.2f} ms per file", flush=True)  # fmt: skip


def watcher_costs(directory: str, files: int) -> None:
    data = os.urandom(100_000)
    other = os.open(directory, os.O_TMPFILE | os.O_RDWR, 0o600)
    current = [-1]

    def heard() -> None:
        os.fstat(current[0])

    for mode in ("none", "add+rm only", "watched") * 2:
        watch = ModifyWatch("reserve_cost")
        c0, t0 = cpu(), time.perf_counter()
        for _ in range(files):
            fd = os.open(directory, os.O_TMPFILE | os.O_RDWR, 0o600)
            current[0] = fd
            wd = watch.add(fd, heard) if mode != "none" else -1
            os.pwrite(other if mode == "add+rm only" else fd, data, 0)
            time.sleep(0.0005)
            watch.remove(wd)
            os.close(fd)
        elapsed = time.perf_counter() - t0
        watch.close()
        print(f"watcher {mode:12s}: CPU {(cpu() - c0) / files * 1e6:4.0f} us per file, "
              f"wall {elapsed / files * 1e6:4.0f} us per file", flush=True)  # fmt: skip
    os.close(other)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="/var/tmp")
    ap.add_argument("--files", type=int, default=2000)
    args = ap.parse_args()
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}  dir {args.dir}")
    print(f"# load before: {load()}", flush=True)
    fallocate_costs(args.dir)
    watcher_costs(args.dir, args.files)
    print(f"# load after: {load()}")


if __name__ == "__main__":
    main()
