"""The round trip of a warm ``open()``'s one request, Python 3.11's ``isatty()`` (FUSE_IOCTL),
timed call by call, with the daemon's C threads at their normal policy and at ``SCHED_FIFO``
and unpinned (issue 36 item 3: is the reply path's wait the queue thread waiting for its CPU,
or for the CPU it is pinned to?).

    .venv/bin/python bench/mount/ioctl_latency.py [--files 200] [--calls 4000] [--threads 1,8]
                                                  [--rounds 4] [--configs default,default-devfuse]
                                                  [--policies other,fifo,unpinned]

Mounts ``--files`` objects as bench/mount/common.py does, opens each file once (the fds are
kept), then for ``--rounds`` rounds, alternately with the C threads (``pyfuse3-ring<cpu>``,
``pyfuse3-loop``) under ``SCHED_OTHER`` pinned as uring.h pins them, ``SCHED_FIFO``
priority 1, and ``SCHED_OTHER`` on any CPU (``--policies``), ``--threads`` reader
threads call ``os.isatty(fd)`` on those fds ``--calls`` times in all, each call timed
(``perf_counter_ns``). The same calls on the local-disk copy first: ext4 answers ENOTTY in
the kernel, no round trip (the floor). Printed: median, p90 and p99 µs per call, and CPU µs
per call of the readers (getrusage) and of the daemon (/proc/PID/stat). The machine may be
shared: the policies alternate within each round, so both see the same load.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import threading
import time
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.mount.common import daemon_cpu, dataset_bench, header, load, read_all, read_py, tiered_mount
from bench.mount.kernel_profile import set_ring_policy
from bench.mount.warm_path import CONFIGS


def timed_calls(fds: list[int], calls: int, threads: int) -> tuple[list[int], float]:
    """``calls`` isatty() calls over ``fds`` by ``threads`` threads: each call's ns, and the
    readers' CPU seconds."""
    per = calls // threads
    out: list[list[int]] = [[] for _ in range(threads)]
    start = threading.Barrier(threads + 1)

    def run(i: int) -> None:
        got = out[i]
        clock = time.perf_counter_ns
        start.wait()
        for k in range(per):
            fd = fds[(i * per + k) % len(fds)]
            t0 = clock()
            os.isatty(fd)
            got.append(clock() - t0)

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    start.wait()
    for w in workers:
        w.join()
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return [ns for got in out for ns in got], cpu


def pct(values: list[int], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] / 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=200)
    ap.add_argument("--calls", type=int, default=4000)
    ap.add_argument("--threads", default="1,8")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--configs", default="default")
    ap.add_argument(
        "--policies", default="other,fifo,unpinned", help="the C threads' (kernel_profile.set_ring_policy)"
    )
    args = ap.parse_args()
    with dataset_bench("ioctl-latency", "il", args.files, 25, ram_bytes=0) as data:
        header(
            "ioctl_latency",
            f"isatty() on {args.files} open files, {args.calls} calls per pass, {args.rounds} rounds, "
            f"C threads {args.policies} alternately",
        )
        local = [os.open(p, os.O_RDONLY) for p in data.disk_paths]
        for config in args.configs.split(","):
            with tiered_mount(data, config, CONFIGS[config]) as (proc, _mnt, paths):
                for _ in range(2):
                    read_all(paths, 1, read_py)
                fds = [os.open(p, os.O_RDONLY) for p in paths]
                print(f"# {config}: {load()}; {set_ring_policy(proc.pid, 'other')} C threads answer requests")
                print(
                    f"{'config':16} {'target':12} {'thr':>3} {'median us':>9} {'p90 us':>7} {'p99 us':>7} "
                    f"{'rd cpu us':>9} {'dm cpu us':>9}"
                )
                for n in (int(t) for t in args.threads.split(",")):
                    rows: dict[str, list[tuple[list[int], float, float]]] = {}
                    for _ in range(args.rounds):
                        for target in ("local disk", *args.policies.split(",")):
                            if target != "local disk":
                                set_ring_policy(proc.pid, target)
                            d0 = daemon_cpu(proc.pid)
                            ns, cpu = timed_calls(local if target == "local disk" else fds, args.calls, n)
                            dm = daemon_cpu(proc.pid) - d0 if target != "local disk" else 0.0
                            rows.setdefault(target, []).append((ns, cpu, dm))
                    set_ring_policy(proc.pid, "other")
                    for target, got in rows.items():
                        every = [x for ns, _, _ in got for x in ns]
                        calls = len(every)
                        print(
                            f"{config:16} {target:12} {n:>3} {median(every) / 1000:>9.1f} {pct(every, 0.9):>7.1f} "
                            f"{pct(every, 0.99):>7.1f} {sum(c for _, c, _ in got) / calls * 1e6:>9.2f} "
                            f"{sum(d for _, _, d in got) / calls * 1e6:>9.2f}",
                            flush=True,
                        )
                for fd in fds:
                    os.close(fd)
                print(f"# {config}: done; {load()}", flush=True)
        for fd in local:
            os.close(fd)


if __name__ == "__main__":
    main()
