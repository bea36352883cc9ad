"""Where a pass's time goes in the whole machine, the mount against local disk (issue 36,
warm20: the gaps of the warm and SSD-hit passes that no daemon request explains).

    .venv/bin/python bench/mount/kernel_profile.py [--files 2000] [--rounds 3] [--threads 1]
        [--kind warm|ssd-hit] [--reader buffered|open] [--configs default,...] [--freq 2999]
        [--ring-policy other,fifo,unpinned] [--keep DIR]

warm_anatomy.py samples the reader's own process; this samples **every CPU** (``perf record
-a -g -e cpu-clock`` with a fixed period, so a sample is 1/``--freq`` s of CPU time) while
the readers run in a child process of their own, and splits the samples four ways: the
readers (their kernel and user time), the mount's daemon (its C threads answering requests,
its Python threads), idle (a CPU with nothing to run: at one thread on a quiet machine the
wait of a round trip shows here) and everyone else (the machine is shared). Same files, the
same reader child for the local-disk copy and the mount, in rounds (local disk, then the
mount under each policy), so each pair sees the same load. ``--ring-policy`` measures the
mount once per policy per round, its C threads (io_uring queue threads ``pyfuse3-ring<cpu>``,
the /dev/fuse ``pyfuse3-loop``) as uring.h leaves them (``other``: pinned, SCHED_OTHER), at
``SCHED_FIFO`` priority 1 (``fifo``: does a reader wait for its CPU to be given to the queue
thread?) or on any CPU (``unpinned``): issue 36 item 3, the reply path.

Printed per configuration: files/s of each (wall, noisy under load), the four shares per file
in µs of CPU time (samples / ``--freq``), the readers' kernel entry points (inclusive µs per
file: open, path walk, read, close...), then the readers' kernel symbols whose self time per
file differs most from local disk's. A *warm* pass reads files the page cache holds (after
the mount's warming epochs: the automatic read mode switched; both page caches filled by
reads, order-0 pages alike, warm_anatomy.py); an *ssd-hit* pass follows ``drop_caches 3``
(dentries too: LOOKUP, OPEN, RELEASE per file in the default mode, which stays in
passthrough). Root only (perf over the kernel, drop_caches, sched_setscheduler).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.mount.common import dataset_bench, drop_caches, header, load, read_all, read_py, tiered_mount
from bench.mount.warm_anatomy import ENTRIES, folios
from bench.mount.warm_path import CONFIGS, automatic, read_buffered

READERS = {"buffered": read_buffered, "open": read_py}
EXTRA_ENTRIES = (
    "fuse_dentry_revalidate",
    "fuse_permission",
    "fuse_file_ioctl",
    "fuse_lookup",
    "fuse_simple_request",
    "fuse_file_io_open",
    "fuse_lock_inode",
    "__mutex_lock",
    "mutex_lock",
    "schedule",
)
#: perf.data -> the pass's window for ``perf script --time`` (the child's monotonic start,end)
WINDOW: dict[str, str] = {}
_HEAD = re.compile(r"^\s*(.*?)\s+(\d+)/(\d+)\s+[\d.]+:")  # comm pid/tid time:
_FRAME = re.compile(r"^\s+[0-9a-f]+\s+(\S+)\s+\((.*)\)\s*$")  # ip sym (dso)


def child(list_file: str, threads: int, reader: str) -> None:
    """The readers' process: read every path of ``list_file`` once ``go`` arrives on stdin,
    print the seconds it took."""
    paths = Path(list_file).read_text().split("\n")
    sys.stdin.readline()
    start = time.clock_gettime(time.CLOCK_MONOTONIC)
    secs = read_all(paths, threads, READERS[reader])
    print(f"{secs:.6f} {start:.6f} {time.clock_gettime(time.CLOCK_MONOTONIC):.6f}", flush=True)


def samples(data: str) -> Iterator[tuple[int, str, list[tuple[str, bool]]]]:
    """The pass's samples (its window only), from ``perf script`` (:func:`parse_script`):
    perf report's ``--pid`` and ``--time`` filters disagreed with each other here (perf 6.1:
    sums by symbol and by thread of one process differed by 2.6x); samples counted by hand
    cannot."""
    cmd = ["perf", "script", "-i", data, "-F", "comm,pid,tid,time,ip,sym,dso", "--time", WINDOW[data]]
    return parse_script(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)


def parse_script(text: str) -> Iterator[tuple[int, str, list[tuple[str, bool]]]]:
    """``perf script -F comm,pid,tid,time,ip,sym,dso`` output -> (pid, thread name, call chain
    leaf first as (symbol, in the kernel)) per sample."""
    head: re.Match[str] | None = None
    chain: list[tuple[str, bool]] = []
    for line in text.splitlines() + [""]:
        if not line.strip():
            if head is not None:
                yield int(head.group(2)), head.group(1).strip(), chain
            head, chain = None, []
        elif line.startswith(("\t", " ")) and head is not None:
            m = _FRAME.match(line)
            if m:
                chain.append((m.group(1), m.group(2) == "[kernel.kallsyms]"))
        else:
            head = _HEAD.match(line)


class Pass:
    """One profiled pass: its seconds and its samples split by whose they are."""

    def __init__(self) -> None:
        self.secs = 0.0
        self.total = self.reader = self.daemon = self.idle = self.reader_kernel = 0
        self.daemon_by_thread: dict[str, int] = defaultdict(int)
        self.inclusive: dict[str, float] = defaultdict(float)
        self.own: dict[str, float] = defaultdict(float)

    def add(self, other: Pass) -> None:
        self.secs += other.secs
        for name in ("total", "reader", "daemon", "idle", "reader_kernel"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for src, dst in (
            (other.daemon_by_thread, self.daemon_by_thread),
            (other.inclusive, self.inclusive),
            (other.own, self.own),
        ):
            for k, v in src.items():
                dst[k] += v

    def count(
        self, got: Iterable[tuple[int, str, list[tuple[str, bool]]]], reader: int, daemon: int | None
    ) -> None:
        """Add samples (:func:`parse_script`): the readers' (process ``reader``), the daemon's
        (its C threads ``pyfuse3-*`` apart), idle (pid 0) or another process's."""
        for pid, comm, chain in got:
            self.total += 1
            if pid == 0:
                self.idle += 1
            elif pid == daemon:
                self.daemon += 1
                self.daemon_by_thread["C threads" if comm.startswith("pyfuse3-") else "Python threads"] += 1
            elif pid == reader:
                self.reader += 1
                if chain and chain[0][1]:
                    self.reader_kernel += 1
                    self.own[chain[0][0]] += 1
                for sym in {sym for sym, kernel in chain if kernel}:
                    self.inclusive[sym] += 1


def profiled(
    paths: list[str], threads: int, reader: str, freq: int, daemon: int | None, keep: str | None
) -> Pass:
    """``paths`` read by a child process under ``perf record -a -g`` of every CPU."""
    with tempfile.NamedTemporaryFile("w", suffix=".list", delete=False) as f:
        f.write("\n".join(paths))
        listing = f.name
    data = listing + ".perf"
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", listing, str(threads), reader],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    perf = subprocess.Popen(
        [
            "perf",
            "record",
            "-q",
            "-a",
            "-g",
            "-k",
            "CLOCK_MONOTONIC",
            "-e",
            "cpu-clock",
            "-c",
            str(10**9 // freq),
        ]
        + ["-o", data],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(0.7)  # perf attached, the child's imports done
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("go\n")
    proc.stdin.flush()
    secs, start, end = (float(x) for x in proc.stdout.readline().split())
    WINDOW[data] = f"{start:.6f},{end:.6f}"  # samples of the pass only, not perf's own start
    perf.send_signal(signal.SIGINT)
    perf.wait()
    proc.wait()
    p = Pass()
    p.secs = secs
    try:
        p.count(samples(data), proc.pid, daemon)
    finally:
        os.unlink(listing)
        WINDOW.pop(data, None)
        if keep:
            os.replace(data, keep)
        else:
            os.unlink(data)
    return p


def ring_threads(pid: int) -> dict[int, str]:
    """The daemon's C threads that answer requests, thread id -> name: the io_uring queue
    threads (``pyfuse3-ring<cpu>``, each pinned to its CPU by uring.h) and the /dev/fuse
    reader (``pyfuse3-loop``, unpinned)."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
        except OSError:
            continue
        if name.startswith(("pyfuse3-ring", "pyfuse3-loop")):
            out[int(task.name)] = name
    return out


def set_ring_policy(pid: int, policy: str) -> int:
    """Put the daemon's C threads (:func:`ring_threads`) under ``policy``: ``other`` (as
    uring.h leaves them: SCHED_OTHER, a queue thread pinned to its CPU), ``fifo`` (SCHED_FIFO
    priority 1, pinned as before) or ``unpinned`` (SCHED_OTHER, any CPU: a request of CPU n
    may then be answered from another CPU). The number of threads changed."""
    every = set(range(os.cpu_count() or 1))
    threads = ring_threads(pid)
    for tid, name in threads.items():
        if policy == "fifo":
            os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(1))
        else:
            os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
        own = name.removeprefix("pyfuse3-ring")
        pinned = {int(own)} if own.isdigit() and policy != "unpinned" else every
        os.sched_setaffinity(tid, pinned)
    return len(threads)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--kind", choices=("warm", "ssd-hit"), default="warm")
    ap.add_argument("--reader", choices=tuple(READERS), default="buffered")
    ap.add_argument("--configs", default="default")
    ap.add_argument(
        "--ring-policy", default="other", help="comma-separated: other, fifo, unpinned (the C threads)"
    )
    ap.add_argument("--freq", type=int, default=2999)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--keep", help="directory: keep each pass's perf.data there")
    args = ap.parse_args()
    policies = args.ring_policy.split(",")
    with dataset_bench("kernel-profile", "kp", args.files, 25, ram_bytes=0) as data:
        header(
            "kernel_profile",
            f"{args.files} files (50-200 KB), {args.kind} passes, reader {args.reader}, {args.threads} thread(s), "
            f"{args.rounds} rounds, perf record -a -g -e cpu-clock -c {10**9 // args.freq} (ns), queue threads {args.ring_policy}",
        )
        for config in args.configs.split(","):
            flags = CONFIGS[config]
            with tiered_mount(data, config, flags) as (proc, _mnt, paths):
                if args.kind == "warm":
                    for _ in range(6 if automatic(flags) else 1):
                        read_all(random.sample(paths, len(paths)), 1, read_py)  # the switch, its epoch
                        time.sleep(1.2)
                    drop_caches(1)  # both page caches filled by reads: order-0 pages alike
                    for target in (data.disk_paths, paths):
                        read_all(target, 1, read_py)
                    print(
                        f"# page cache: disk {folios(data.disk_paths[:200])}; mount {folios(paths[:200])} (200 files)"
                    )
                print(
                    f"# {config}: datahub mount {' '.join(flags) or '(default flags)'}; {load()}", flush=True
                )
                totals = {name: Pass() for name in ("disk", *policies)}
                for i in range(args.rounds):
                    targets = [("disk", data.disk_paths, None)] + [(pol, paths, proc.pid) for pol in policies]
                    for name, target, daemon in targets:
                        if daemon is not None:
                            set_ring_policy(daemon, name)
                        order = random.sample(target, len(target))
                        if args.kind == "ssd-hit":
                            drop_caches(3)
                        keep = os.path.join(args.keep, f"{config}-{name}-{i}.perf") if args.keep else None
                        totals[name].add(profiled(order, args.threads, args.reader, args.freq, daemon, keep))
                    set_ring_policy(proc.pid, "other")
                files_read = args.files * args.rounds

                def us(count: float, files_read: int = files_read) -> float:
                    return count / args.freq / files_read * 1e6

                disk = totals["disk"]
                print(
                    f"# {config}: {load()}; µs of CPU time per file (samples / freq), means over {args.rounds} rounds"
                )
                print(
                    f"{'target':12} {'files/s':>8} {'ratio':>6} {'wall us':>8} {'reader':>7} {'r.kern':>7} "
                    f"{'daemon':>7} {'dm C':>6} {'dm py':>6} {'idle':>7} {'others':>7}"
                )
                for name, t in totals.items():
                    others = t.total - t.reader - t.daemon - t.idle
                    label = "local disk" if name == "disk" else f"mount/{name}"
                    print(
                        f"{label:12} {files_read / t.secs:>8,.0f} {disk.secs / t.secs:>6.2f} {t.secs / files_read * 1e6:>8.1f} "
                        f"{us(t.reader):>7.1f} {us(t.reader_kernel):>7.1f} {us(t.daemon):>7.1f} "
                        f"{us(t.daemon_by_thread['C threads']):>6.1f} {us(t.daemon_by_thread['Python threads']):>6.1f} "
                        f"{us(t.idle):>7.1f} {us(others):>7.1f}"
                    )
                names = [n_ for n_ in totals if n_ != "disk"]
                print(
                    f"{'readers: entry point (inclusive us)':36} {'disk':>7} "
                    + " ".join(f"{x:>7}" for x in names)
                )
                for entry in (*ENTRIES, *EXTRA_ENTRIES):
                    vals = [us(totals[x].inclusive[entry]) for x in ("disk", *names)]
                    if any(v >= 0.05 for v in vals):
                        print(f"{entry:36} " + " ".join(f"{v:>7.2f}" for v in vals))
                first = totals[names[0]]
                syms = set(disk.own) | set(first.own)
                ranked = sorted(syms, key=lambda s: -abs(us(first.own[s]) - us(disk.own[s])))
                print(
                    f"{'readers: kernel symbol (self us)':36} {'disk':>7} "
                    + " ".join(f"{x:>7}" for x in names)
                )
                for s in ranked[: args.top]:
                    vals = [us(totals[x].own[s]) for x in ("disk", *names)]
                    print(f"{s[:36]:36} " + " ".join(f"{v:>7.2f}" for v in vals))


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        main()
