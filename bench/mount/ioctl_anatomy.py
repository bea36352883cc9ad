"""What a warm ``open()``'s one request (Python 3.11's ``isatty()``, FUSE_IOCTL) costs inside a
pass of reads, against the same call timed call by call (issue 36, warm36: ioctl_latency.py
times 3.2 µs per call in a tight loop, yet a warm ``open()`` pass costs ~15 µs per file more
than a buffered one).

    .venv/bin/python bench/mount/ioctl_anatomy.py [--files 2000] [--rounds 3] [--calls 4000]
                                                  [--perf] [--configs default]

Mounts ``--files`` objects as bench/mount/common.py does (RAM tier off), warms the mount
until an epoch sends no OPEN and no READ (the automatic read mode switched to zero-message
opens: a warm pass then sends nothing but the ioctl), then in ``--rounds`` rounds, one reader
thread, each row on local disk and on the mount alternately, the same files in a new
shuffled order each time:

- ``os``: ``os.open``, ``os.read`` until EOF, ``os.close`` (no request);
- ``os+isatty``: the same with ``os.isatty(fd)`` after the open, as Python's ``open()`` does;
- ``open()`` and ``buffered`` (``open(p, "rb", buffering=1 MiB)``): Python's own readers;
- ``isatty loop``: ``os.isatty`` on ``--files`` descriptors kept open, ``--calls`` calls in a
  row (ioctl_latency.py's measure: the round trip with nothing between two calls);
- ``pipe pingpong`` (the machine's floor, no FUSE): ``--calls`` one-byte round trips over two
  pipes to a child process, both pinned to one CPU, as the reader and its CPU's io_uring
  queue thread are: what a synchronous request to another process costs on this machine.

Printed per row, per file (per call for the loop): wall µs; the reader's CPU µs and its
context switches and migrations between CPUs (its own ``/proc/thread-self/schedstat`` and
``sched``: nanoseconds, not clock ticks); the daemon's C threads' CPU µs and switches (the
io_uring queue threads ``pyfuse3-ring<cpu>`` and the /dev/fuse thread, each one's
``schedstat``), and its Python threads' CPU µs (none of the requests reach them: what they
show is the daemon's own timers); and *wait* = wall - reader - C threads, the time neither
ran (a CPU woken from idle, another process). The ioctl's price in a pass is the difference
of the ``os+isatty`` and ``os`` rows; the loop's row is what it costs with warm caches.

``--perf`` adds, for the ``os+isatty`` and ``os`` rows of the mount, ``perf record -g`` of
the reader and the C threads (``-e cpu-clock`` at a fixed period, so a sample is a fixed
slice of CPU time) and prints, per thread group, the kernel functions (inclusive) whose µs
per file differ most between the two: where the ioctl's µs go. Root only (perf, the
tracepoint, drop of nothing).
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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.mount.common import dataset_bench, header, load, read_all, read_os, read_py, tiered_mount
from bench.mount.warm_path import CONFIGS, read_buffered

_HEAD = re.compile(r"^\s*(.*?)\s+(\d+)/(\d+)\s")  # comm pid/tid
_FRAME = re.compile(r"^\s+[0-9a-f]+\s+(\S+)\s+\((.*)\)\s*$")  # ip sym (dso)


def read_os_isatty(path: str) -> int:
    """``read_os`` with the ioctl Python's ``open()`` sends, at the same place (after the open)."""
    return read_os(path, ask_isatty=True)


READERS: dict[str, Callable[[str], int]] = {
    "os": read_os,
    "os+isatty": read_os_isatty,
    "open()": read_py,
    "buffered": read_buffered,
}


def own_thread() -> tuple[int, int, int]:
    """This thread's CPU ns, context switches and migrations so far."""
    ns = int(Path("/proc/thread-self/schedstat").read_text().split()[0])
    switches = migrations = 0
    for line in Path("/proc/thread-self/status").read_text().splitlines():
        if line.endswith("ctxt_switches") or "ctxt_switches:" in line:
            switches += int(line.split()[-1])
    for line in Path("/proc/thread-self/sched").read_text().splitlines():
        if line.startswith("se.nr_migrations"):
            migrations = int(line.split()[-1])
    return ns, switches, migrations


def daemon_threads(pid: int) -> dict[str, tuple[int, int]]:
    """CPU ns and context switches so far of the daemon's C threads (``c``: ``pyfuse3-*``) and
    of its Python threads (``py``), summed (a thread that ended meanwhile drops out)."""
    out = {"c": [0, 0], "py": [0, 0]}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text()
            ns = int((task / "schedstat").read_text().split()[0])
            cs = sum(
                int(line.split()[-1])
                for line in (task / "status").read_text().splitlines()
                if "ctxt_switches:" in line
            )
        except (OSError, ValueError):
            continue
        group = out["c" if name.startswith("pyfuse3-") else "py"]
        group[0] += ns
        group[1] += cs
    return {k: (v[0], v[1]) for k, v in out.items()}


def c_thread_ids(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            if (task / "comm").read_text().startswith("pyfuse3-"):
                out.append(int(task.name))
        except OSError:
            pass
    return out


@dataclass
class Row:
    """Per-file means over a row's passes (µs, switches, migrations)."""

    walls: list[float] = field(default_factory=list)
    reader: list[float] = field(default_factory=list)
    switches: list[float] = field(default_factory=list)
    migrations: list[float] = field(default_factory=list)
    c_us: list[float] = field(default_factory=list)
    c_cs: list[float] = field(default_factory=list)
    py_us: list[float] = field(default_factory=list)

    def line(self, target: str, name: str) -> str:
        m = median
        wait = m([w - r - c for w, r, c in zip(self.walls, self.reader, self.c_us, strict=True)])
        return (
            f"{target:10} {name:12} {min(self.walls):>7.1f} {m(self.walls):>7.1f} {m(self.reader):>7.1f} "
            f"{m(self.switches):>5.2f} {m(self.migrations):>5.3f} {m(self.c_us):>6.1f} {m(self.c_cs):>5.2f} "
            f"{m(self.py_us):>5.1f} {wait:>6.1f}"
        )


def measure(row: Row, work: Callable[[], int], daemon: int | None) -> None:
    """Run ``work`` (returns how many files or calls it did) and add its per-unit figures."""
    d0 = daemon_threads(daemon) if daemon else None
    r0 = own_thread()
    t0 = time.perf_counter_ns()
    n = work()
    wall = time.perf_counter_ns() - t0
    r1 = own_thread()
    row.walls.append(wall / n / 1e3)
    row.reader.append((r1[0] - r0[0]) / n / 1e3)
    row.switches.append((r1[1] - r0[1]) / n)
    row.migrations.append((r1[2] - r0[2]) / n)
    if d0 is None or daemon is None:
        row.c_us.append(0.0)
        row.c_cs.append(0.0)
        row.py_us.append(0.0)
        return
    d1 = daemon_threads(daemon)
    row.c_us.append((d1["c"][0] - d0["c"][0]) / n / 1e3)
    row.c_cs.append((d1["c"][1] - d0["c"][1]) / n)
    row.py_us.append((d1["py"][0] - d0["py"][0]) / n / 1e3)


def pass_of(paths: list[str], reader: Callable[[str], int]) -> Callable[[], int]:
    def run() -> int:
        order = paths[:]
        random.shuffle(order)
        for p in order:
            reader(p)
        return len(order)

    return run


def loop_of(fds: list[int], calls: int) -> Callable[[], int]:
    def run() -> int:
        for k in range(calls):
            os.isatty(fds[k % len(fds)])
        return calls

    return run


def pingpong_of(calls: int) -> Callable[[], int]:
    """``calls`` round trips of one byte over two pipes to a child process, both pinned to one
    CPU (as the reader and the io_uring queue thread of its CPU are): the machine's price of
    a synchronous request to another process, with no FUSE in it."""

    def run() -> int:
        cpu = min(os.sched_getaffinity(0))
        down, up = os.pipe(), os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover (the child)
            os.sched_setaffinity(0, {cpu})
            for _ in range(calls):
                os.read(down[0], 1)
                os.write(up[1], b"x")
            os._exit(0)
        saved = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {cpu})
        try:
            time.sleep(0.05)  # the child pinned and waiting
            t0 = time.perf_counter_ns()
            for _ in range(calls):
                os.write(down[1], b"x")
                os.read(up[0], 1)
            run.last_ns = time.perf_counter_ns() - t0  # type: ignore[attr-defined]
        finally:
            os.sched_setaffinity(0, saved)
            os.waitpid(child, 0)
            for fd in (*down, *up):
                os.close(fd)
        return calls

    return run


def profile(tids: dict[str, list[int]], work: Callable[[], int], period_ns: int) -> tuple[dict, int]:
    """``work`` under ``perf record -g -e cpu-clock`` of the given threads: per group, inclusive
    kernel µs by function, and how many units ``work`` did."""
    every = [t for ts in tids.values() for t in ts]
    group_of = {t: g for g, ts in tids.items() for t in ts}
    with tempfile.NamedTemporaryFile(suffix=".perf", delete=False) as f:
        data = f.name
    perf = subprocess.Popen(
        ["perf", "record", "-q", "-g", "-k", "CLOCK_MONOTONIC", "-e", "cpu-clock", "-c", str(period_ns)]
        + ["-o", data, "-t", ",".join(map(str, every))],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(2.0)  # perf attached (slow under load): samples outside the work's window are dropped
    start = time.clock_gettime(time.CLOCK_MONOTONIC)
    n = work()
    end = time.clock_gettime(time.CLOCK_MONOTONIC)
    perf.send_signal(signal.SIGINT)
    perf.wait()
    out = subprocess.run(
        ["perf", "script", "-i", data, "-F", "comm,pid,tid,ip,sym,dso", "--time", f"{start:.6f},{end:.6f}"],
        capture_output=True,
        text=True,
    ).stdout
    os.unlink(data)
    incl: dict[str, dict[str, float]] = {g: defaultdict(float) for g in tids}
    tid, chain = None, []
    for line in out.splitlines() + [""]:
        if not line.strip():
            if tid in group_of:
                g = group_of[tid]
                incl[g]["(all)"] += period_ns / 1e3
                for sym in {s for s, kernel in chain if kernel}:
                    incl[g][sym] += period_ns / 1e3
            tid, chain = None, []
        elif line.startswith(("\t", " ")) and tid is not None:
            m = _FRAME.match(line)
            if m:
                chain.append((m.group(1), m.group(2) == "[kernel.kallsyms]"))
        else:
            h = _HEAD.match(line)
            tid = int(h.group(3)) if h else None
    return incl, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=4000)
    ap.add_argument("--configs", default="default")
    ap.add_argument("--perf", action="store_true", help="profile the os and os+isatty rows (perf)")
    args = ap.parse_args()
    from tests.fuse.fuse_tracepoint import FuseRequests, per_file

    with dataset_bench("ioctl-anatomy", "ia", args.files, 25, ram_bytes=0) as data:
        header("ioctl_anatomy", f"{args.files} files, {args.rounds} rounds, 1 reader thread, warm")
        for config in args.configs.split(","):
            with tiered_mount(data, config, CONFIGS[config]) as (proc, mnt, paths):
                for _ in range(6):  # until the automatic read mode switched and its READ epoch passed
                    with FuseRequests(mnt) as req:
                        read_all(paths, 1, read_py)
                    counts = req.counts()
                    if not counts.get("FUSE_OPEN") and not counts.get("FUSE_READ"):
                        break
                    time.sleep(1.2)
                for p in data.disk_paths:  # local disk's page cache filled by reads as well
                    read_py(p)
                with FuseRequests(mnt) as req:
                    read_all(paths, 1, read_py)
                print(f"# {config}: a warm open() epoch sends {per_file(req.counts(), len(paths))}; {load()}")
                print(
                    f"{'target':10} {'row':12} {'wall':>7} {'wall':>7} {'reader':>7} {'rd cs':>5} {'rd mig':>5} "
                    f"{'C us':>6} {'C cs':>5} {'py us':>5} {'wait':>6}"
                )
                print(
                    f"{'':10} {'':12} {'min':>7} {'median':>7} {'cpu us':>7}  (per file; per call for the loop)"
                )
                rows: dict[tuple[str, str], Row] = defaultdict(Row)
                fds = {
                    "local disk": [os.open(p, os.O_RDONLY) for p in data.disk_paths],
                    "mount": [os.open(p, os.O_RDONLY) for p in paths],
                }
                for _ in range(args.rounds):
                    for name, reader in READERS.items():
                        for target, files, pid in (
                            ("local disk", data.disk_paths, None),
                            ("mount", paths, proc.pid),
                        ):
                            measure(rows[(target, name)], pass_of(files, reader), pid)
                    for target, pid in (("local disk", None), ("mount", proc.pid)):
                        measure(rows[(target, "isatty loop")], loop_of(fds[target], args.calls), pid)
                    pong = pingpong_of(args.calls)
                    pong()
                    rows[("machine", "pipe pingpong")].walls.append(pong.last_ns / args.calls / 1e3)  # type: ignore[attr-defined]
                for (target, name), row in rows.items():
                    if target == "machine":
                        print(
                            f"{target:10} {name:12} {min(row.walls):>7.1f} {median(row.walls):>7.1f}  (wall per round trip)"
                        )
                        continue
                    print(row.line(target, name), flush=True)
                for every in fds.values():
                    for fd in every:
                        os.close(fd)
                if args.perf:
                    groups = {"reader": [threading_native_id()], "C threads": c_thread_ids(proc.pid)}
                    got: dict[str, dict[str, dict[str, float]]] = {}
                    for name in ("os", "os+isatty"):
                        total: dict[str, dict[str, float]] = {g: defaultdict(float) for g in groups}
                        units = 0
                        for _ in range(args.rounds):
                            incl, n = profile(groups, pass_of(paths, READERS[name]), 50_000)
                            units += n
                            for g, syms in incl.items():
                                for s, us in syms.items():
                                    total[g][s] += us
                        got[name] = {
                            g: {s: us / units for s, us in syms.items()} for g, syms in total.items()
                        }
                    for g in groups:
                        a, b = got["os"][g], got["os+isatty"][g]
                        diff = sorted(((b.get(s, 0) - a.get(s, 0), s) for s in set(a) | set(b)), reverse=True)
                        print(
                            f"# perf, {g}: µs per file (inclusive), os+isatty against os, the largest differences"
                        )
                        for d, s in diff[:25]:
                            print(f"#   {s:40} {b.get(s, 0):7.2f} {a.get(s, 0):7.2f} {d:+7.2f}")
                print(f"# {config}: done; {load()}", flush=True)


def threading_native_id() -> int:
    import threading

    return threading.get_native_id()


if __name__ == "__main__":
    main()
