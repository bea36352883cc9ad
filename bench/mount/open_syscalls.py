"""System calls, block I/O and context switches per file of a warm open and an SSD-tier hit,
the reader's and the daemon's apart (issue 36: where a cached open's time goes).

    .venv/bin/python bench/mount/open_syscalls.py [--files 1000] [--passes 2] [--threads 1,8]
                                                  [--configs default] [--kinds ssd-hit,warm]
                                                  [--idle SECONDS] [--baseline-python PY]

Uploads ``--files`` objects of 50-200 KB and mounts them as warm_path.py does (RAM tier off,
the cold pass first). Each row is ``--passes`` rounds of a local-disk pass then a mount pass,
each pass under two ``perf stat`` counters of kernel tracepoints, one attached to this process
(the readers) and one to the daemon: ``ioctl`` system calls (a reader's: Python's
``isatty()`` TCGETS, which a FUSE file turns into a FUSE_IOCTL request; the daemon's:
``FUSE_DEV_IOC_BACKING_OPEN`` / ``_CLOSE``, one per backing id registered or closed),
``io_uring_enter`` (the daemon's queue threads: about one per request), ``fstat``,
``cachestat`` (the automatic mode's residency sample), block requests issued (the SSD-tier
hit's disk read: in the reader's context with passthrough, the daemon's with READs in C) and
``sched_switch`` (a request a reader waits for costs it a switch pair). Printed per row: the
counts per file of the mount pass and of the disk pass (reader side only: local disk has no
daemon), and the FUSE requests per file by opcode (the fuse tracepoint, one more untimed
pass). ``ssd-hit`` passes drop the page cache first (``--drop``); ``warm`` rows come after
warming epochs that repeat until one sends no OPEN and no READ (the automatic mode switched).
``--idle``: after the rows, the daemon with no reader for that long, its CPU ms and the
same counts per second (its once-a-second work: the hits thread, the stats snapshot, the
sweep of the C tables for page files another process removed). ``NAME@base`` configs run
their daemon with ``--baseline-python`` (warm_path.py's ``daemon_python``): the same-run
baseline of a change, alternately (``--configs default@base,default,default@base,default``).
Counts, not time: they hold on a loaded machine. ``uptime`` load is printed. Needs root.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.mount.common import (
    add_configs_option,
    chosen_configs,
    daemon_cpu,
    dataset_bench,
    drop_caches,
    header,
    load,
    read_all,
    read_py,
    tiered_mount,
)
from bench.mount.warm_path import CONFIGS, READERS, automatic, daemon_python
from tests.fuse.fuse_tracepoint import FuseRequests, per_file

#: perf events counted per pass, with the short names printed
EVENTS = {
    "syscalls:sys_enter_ioctl": "ioctl",
    "syscalls:sys_enter_io_uring_enter": "uring",
    "syscalls:sys_enter_newfstatat": "fstat",  # glibc's fstat() is newfstatat(fd, "", AT_EMPTY_PATH)
    "syscalls:sys_enter_cachestat": "cachestat",
    "block:block_rq_issue": "blk",
    "sched:sched_switch": "cs",
}


def counted(pid: int, out: Path) -> subprocess.Popen:
    """``perf stat`` of :data:`EVENTS` on every thread of ``pid`` until SIGINT, CSV to ``out``."""
    events = ",".join(EVENTS)
    return subprocess.Popen(
        ["perf", "stat", "-x", ",", "-e", events, "-p", str(pid), "-o", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stopped(perf: subprocess.Popen, out: Path) -> Counter[str]:
    """Stop ``perf stat`` and parse its counts by :data:`EVENTS` short name."""
    perf.send_signal(signal.SIGINT)
    perf.wait()
    got: Counter[str] = Counter()
    for line in out.read_text().splitlines():
        parts = line.split(",")
        if len(parts) > 2 and parts[2] in EVENTS and parts[0].strip().isdigit():
            got[EVENTS[parts[2]]] += int(parts[0])
    return got


def one_pass(
    paths: list[str], reader: Callable[[str], int], threads: int, pids: dict[str, int], scratch: Path
) -> dict[str, Counter[str]]:
    """Read every path once (shuffled) with both counters attached: counts by side."""
    order = paths[:]
    random.shuffle(order)
    perfs = {
        side: (counted(pid, scratch / f"{side}.csv"), scratch / f"{side}.csv") for side, pid in pids.items()
    }
    time.sleep(0.5)  # perf attached
    read_all(order, threads, reader)
    return {side: stopped(perf, out) for side, (perf, out) in perfs.items()}


def warmed(paths: list[str], mnt: Path, flags: tuple[str, ...], threads: int) -> str:
    """Epochs until one sends no OPEN and no READ (the automatic mode switched, and the epoch
    after it is over; at most 6): the last epoch's requests per file."""
    text = ""
    for _ in range(6 if automatic(flags) else 1):
        with FuseRequests(mnt) as req:
            read_all(paths, threads, read_py)
        counts = req.counts()
        text = per_file(counts, len(paths))
        if not counts.get("FUSE_OPEN") and not counts.get("FUSE_READ"):
            break
        time.sleep(1.2)  # a tick of the automatic mode's decision
    return text


def fmt(c: Counter[str], files: int) -> str:
    return " ".join(f"{name} {c[name] / files:.2f}" for name in EVENTS.values())


def idle(pid: int, seconds: float, scratch: Path) -> str:
    """The daemon with no reader for ``seconds``: its CPU ms and counts per second (what
    its once-a-second work costs: the hits thread, the stats snapshot, the C tables' sweep)."""
    perf = counted(pid, scratch / "idle.csv")
    time.sleep(0.5)  # perf attached
    cpu0 = daemon_cpu(pid)
    time.sleep(seconds)
    cpu = daemon_cpu(pid) - cpu0
    got = stopped(perf, scratch / "idle.csv")
    return f"idle {seconds:.0f} s: daemon {cpu * 1e3 / seconds:.2f} ms CPU/s, " + " ".join(
        f"{name} {got[name] / seconds:.1f}/s" for name in EVENTS.values()
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--drop", type=int, choices=(1, 3), default=3)
    ap.add_argument("--threads", default="1,8")
    ap.add_argument("--kinds", default="ssd-hit,warm")
    ap.add_argument(
        "--idle", type=float, default=0.0, help="seconds: the daemon's CPU with no reader, after the rows"
    )
    ap.add_argument(
        "--baseline-python", help="interpreter whose daemon runs the NAME@base configs (warm_path.py)"
    )
    known = {**CONFIGS, **{f"{name}@base": flags for name, flags in CONFIGS.items()}}
    add_configs_option(ap, known, default="default")
    args = ap.parse_args()
    configs = chosen_configs(ap, args, known)
    if any(c.endswith("@base") for c in configs) and not args.baseline_python:
        ap.error("an @base config needs --baseline-python")
    threads = [int(t) for t in args.threads.split(",")]
    kinds = [k for k in ("ssd-hit", "warm") if k in args.kinds.split(",")]
    with dataset_bench("open-syscalls", "os", args.files, 25, ram_bytes=0) as data:
        header("open_syscalls", f"{args.files} files (50-200 KB), RAM tier off, {args.passes} rounds per row")
        scratch = Path(tempfile.mkdtemp(prefix="open-syscalls-perf-"))
        for config in configs:
            flags = known[config]
            python = args.baseline_python if config.endswith("@base") else sys.executable
            with daemon_python(python), tiered_mount(data, config, flags) as (proc, mnt, paths):
                print(
                    f"# {config}: datahub mount {' '.join(flags) or '(default flags)'}; {load()}", flush=True
                )
                for kind in kinds:
                    for rname, reader in READERS.items():
                        for n in threads:
                            if kind == "warm":
                                print(f"#   warmed: {warmed(paths, mnt, flags, n)}", flush=True)
                                read_all(data.disk_paths, 1, read_py)
                            mount: Counter[str] = Counter()
                            daemon: Counter[str] = Counter()
                            disk: Counter[str] = Counter()
                            for _ in range(args.passes):
                                if kind == "ssd-hit":
                                    drop_caches(args.drop)
                                disk += one_pass(
                                    data.disk_paths, reader, n, {"reader": os.getpid()}, scratch
                                )["reader"]
                                if kind == "ssd-hit":
                                    drop_caches(args.drop)
                                got = one_pass(
                                    paths, reader, n, {"reader": os.getpid(), "daemon": proc.pid}, scratch
                                )
                                mount += got["reader"]
                                daemon += got["daemon"]
                            files = args.passes * len(paths)
                            if kind == "ssd-hit":
                                drop_caches(args.drop)
                            with FuseRequests(mnt) as req:
                                read_all(random.sample(paths, len(paths)), n, reader)
                            print(f"{config} {kind} {rname} {n} thr; {load()}")
                            print(f"  disk reader:   {fmt(disk, files)}")
                            print(f"  mount reader:  {fmt(mount, files)}")
                            print(f"  mount daemon:  {fmt(daemon, files)}")
                            print(f"  requests:      {per_file(req.counts(), len(paths))}", flush=True)
                if args.idle:
                    print(f"{config} {idle(proc.pid, args.idle, scratch)}; {load()}", flush=True)


if __name__ == "__main__":
    main()
