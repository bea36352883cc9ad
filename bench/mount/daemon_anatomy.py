"""Where the daemon's CPU per SSD-tier hit goes, thread by thread and symbol by symbol
(issue 36: the C threads' 42-47 µs per hit).

    .venv/bin/python bench/mount/daemon_anatomy.py [--files 2000] [--rounds 3] [--drop 1|3]
                                                   [--reader buffered|open] [--configs default]
                                                   [--threads 1] [--freq 4999] [--top 30] [--keep DIR]

Uploads ``--files`` objects of 50-200 KB (bench/mount/common.py), mounts each configuration
(warm_path.py's names), and right after the mount's cold pass (as warm_path's ssd-hit rows:
the automatic mode stays in passthrough) runs ``--rounds`` SSD-hit passes (``drop_caches``
``--drop`` first; 3 also drops dentries, so each open sends a LOOKUP), each under ``perf
record -g -p <daemon>``. Printed per configuration: files/s, the daemon's CPU per file from
/proc (utime+stime) and from perf's samples, then per thread name (``pyfuse3-ring<cpu>``:
the io_uring queue threads; ``pyfuse3-loop``: the /dev/fuse reader; the rest Python) its CPU
µs per file, and the symbols with the most self CPU per file in the C threads. Also the
FUSE requests per file by opcode are what warm_path prints; this script does not trace.
``uptime`` load is printed with each configuration: the machine may be shared. Needs root.
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.mount.common import (
    daemon_cpu,
    dataset_bench,
    drop_caches,
    header,
    load,
    read_all,
    read_py,
    tiered_mount,
)
from bench.mount.warm_path import CONFIGS, read_buffered

READERS = {"buffered": read_buffered, "open": read_py}
_LINE = re.compile(r"^\s*([\d.]+)%\s+(\d+)\s+(\S+)\s+\[[.k]\]\s+(\S+)")  # self%, samples, comm, symbol


def comm_kind(comm: str) -> str:
    """The daemon's threads by job: io_uring queue threads, the /dev/fuse C reader, Python."""
    if comm.startswith("pyfuse3-ring"):
        return "ring (C)"
    if comm.startswith("pyfuse3"):
        return comm + " (C)"
    return "python/other"


def profiled(pid: int, freq: int, run, keep: str | None = None) -> tuple[float, dict[tuple[str, str], float]]:
    """``run()`` under ``perf record -g -p pid``: (seconds, self samples per (comm, symbol));
    ``keep``: the perf.data file is moved there (for call graphs)."""
    with tempfile.NamedTemporaryFile(suffix=".perf", delete=False) as f:
        data = f.name
    perf = subprocess.Popen(
        ["perf", "record", "-q", "-g", "-F", str(freq), "-p", str(pid), "-o", data],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(0.5)  # perf attached
    secs = run()
    perf.send_signal(signal.SIGINT)
    perf.wait()
    try:
        out = subprocess.run(
            [
                "perf",
                "report",
                "-i",
                data,
                "--stdio",
                "--sort",
                "comm,sym",
                "-g",
                "none",
                "-q",
                "--no-children",
                "-n",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    finally:
        if keep:
            os.replace(data, keep)
        else:
            os.unlink(data)
    samples: dict[tuple[str, str], float] = defaultdict(float)
    for line in out.splitlines():
        m = _LINE.match(line)
        if m:
            samples[(m.group(3), m.group(4))] += float(m.group(2))
    return secs, samples


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--drop", type=int, choices=(1, 3), default=3)
    ap.add_argument("--reader", choices=tuple(READERS), default="buffered")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--configs", default="default")
    ap.add_argument("--freq", type=int, default=4999)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--keep", help="directory: keep each pass's perf.data there (CONFIG-ROUND.perf)")
    args = ap.parse_args()
    reader = READERS[args.reader]
    with dataset_bench("daemon-anatomy", "da", args.files, 25, ram_bytes=0) as data:
        header(
            "daemon_anatomy",
            f"{args.files} files (50-200 KB), ssd-hit passes (drop_caches {args.drop}), reader "
            f"{args.reader}, {args.threads} thread(s), {args.rounds} rounds, perf -F {args.freq} on the daemon",
        )
        for config in args.configs.split(","):
            flags = CONFIGS[config]
            with tiered_mount(data, config, flags) as (proc, _mnt, paths):
                print(
                    f"# {config}: datahub mount {' '.join(flags) or '(default flags)'}; {load()}", flush=True
                )
                secs = cpu = 0.0
                total: dict[tuple[str, str], float] = defaultdict(float)
                for i in range(args.rounds):
                    drop_caches(args.drop)
                    order = random.sample(paths, len(paths))
                    c0 = daemon_cpu(proc.pid)
                    keep = os.path.join(args.keep, f"{config}-{i}.perf") if args.keep else None
                    s, samples = profiled(
                        proc.pid, args.freq, lambda o=order: read_all(o, args.threads, reader), keep
                    )
                    cpu += daemon_cpu(proc.pid) - c0
                    secs += s
                    for k, v in samples.items():
                        total[k] += v
                n = args.files * args.rounds
                us = 1e6 / args.freq / n  # µs per file of one sample
                kinds: dict[str, float] = defaultdict(float)
                for (comm, _sym), v in total.items():
                    kinds[comm_kind(comm)] += v
                print(
                    f"# files/s {n / secs:,.0f}; daemon CPU µs per file: /proc {cpu / n * 1e6:.1f}, "
                    f"perf {sum(total.values()) * us:.1f} (perf runs 0.5 s longer per round); {load()}"
                )
                for kind, v in sorted(kinds.items(), key=lambda kv: -kv[1]):
                    print(f"{kind:32} {v * us:8.2f} µs per file")
                c_syms: dict[str, float] = defaultdict(float)
                py_syms: dict[str, float] = defaultdict(float)
                for (comm, sym), v in total.items():
                    (py_syms if comm_kind(comm) == "python/other" else c_syms)[sym] += v
                for title, syms in (("C threads", c_syms), ("python/other", py_syms)):
                    print(f"{title + ': symbol (self)':48} {'µs/file':>8}")
                    for sym, v in sorted(syms.items(), key=lambda kv: -kv[1])[: args.top]:
                        print(f"  {sym[:46]:46} {v * us:8.2f}")


if __name__ == "__main__":
    main()
