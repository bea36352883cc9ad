"""Warm epoch over a mounted version vs local disk (issue 13 item 6: requests that still reach the daemon).

    .venv/bin/python bench/mount/warm_open.py [--files 2000] [--passes 3] [--configs default,no-fastloop]

Uploads ``--files`` objects (4-16 KB) to a moto server on loopback, mounts the version with
the real ``datahub mount ... --foreground`` daemon (a subprocess, as in tests/fuse), reads
every file once (cold), then times warm passes over the mount and over a local-disk copy of
the same files, in the same run:

- ``py``: Python ``open(path, "rb").read()``; ``open()`` calls ``isatty()``, an ioctl
  (TCGETS) that FUSE forwards to the daemon on every call (opcode 39, FUSE_IOCTL);
- ``os``: ``os.open`` + ``os.read`` + ``os.close``, which asks the daemon nothing when warm;

single-threaded and with 8 threads. For the mount it also prints the daemon's CPU per file
(utime+stime from /proc/PID/stat) and its read syscalls per file (/proc/PID/io ``syscr``:
each request is one read of /dev/fuse, by the trio loop or, with fastloop.patch, by
pyfuse3's C reader thread). Figures are the best of ``--passes`` passes. ``--configs``: the
mounts measured in the same run, one after the other (``default``; ``no-fastloop``, the
baseline of fastloop.patch: requests read on the trio loop).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.mount.common import (
    add_configs_option,
    bench_env,
    chosen_configs,
    daemon_cpu,
    daemon_reads,
    local_copy,
    random_objects,
    read_all,
    read_os,
    read_py,
)
from tests.fuse.conftest import upload_dataset

READERS: dict[str, Callable[[str], int]] = {"py": read_py, "os": read_os}
#: mount configurations: name -> extra ``datahub mount`` flags
CONFIGS = {"default": (), "no-io-uring": ("--no-io-uring",), "no-fastloop": ("--no-fastloop",)}


def timed_pass(
    paths: list[str], reader: Callable[[str], int], threads: int, pid: int | None
) -> tuple[float, float, int]:
    """(seconds, daemon CPU seconds, daemon read syscalls) of one pass over ``paths``."""
    cpu0, rd0 = daemon_cpu(pid), daemon_reads(pid)
    dt = read_all(paths, threads, reader, chunksize=64)
    return dt, daemon_cpu(pid) - cpu0, daemon_reads(pid) - rd0


def measure(
    paths: list[str], reader: Callable[[str], int], threads: int, pid: int | None, passes: int
) -> tuple[float, float, float]:
    """Best files/s over ``passes``, with that pass's daemon CPU µs/file and reads/file."""
    best = None
    for _ in range(passes):
        dt, cpu, reads = timed_pass(paths, reader, threads, pid)
        if best is None or dt < best[0]:
            best = (dt, cpu, reads)
    dt, cpu, reads = best
    n = len(paths)
    return n / dt, cpu / n * 1e6, reads / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--passes", type=int, default=3)
    add_configs_option(ap, CONFIGS, default="default")
    args = ap.parse_args()
    configs = chosen_configs(ap, args, CONFIGS)
    objects = random_objects(args.files, 13, 4096, 16384)
    tmp = Path(tempfile.mkdtemp(prefix="warm-open-"))
    try:
        with bench_env(tmp, ram_bytes=64 * 1024**2, disk_bytes=20 * 1024**3) as env:
            ds = upload_dataset(env, "warm", objects)
            disk = local_copy(tmp / "local", objects)
            for p in disk:
                read_os(p)
            import pyfuse3

            print(
                f"# warm_open: {args.files} files (4-16 KB), best of {args.passes} passes, pyfuse3 {pyfuse3.__version__}"
            )
            print(
                f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}  load {os.getloadavg()[0]:.2f}  nproc {os.cpu_count()}"
            )
            print(
                f"{'config':12} {'reader':6} {'threads':>7} {'disk files/s':>13} {'mount files/s':>14} {'ratio':>6} {'daemon us/file':>15} {'daemon reads/file':>18}"
            )
            for config in configs:
                mnt = env.mountpoint(f"warm-{config}")
                with env.mounted(mnt, "warm", *CONFIGS[config]) as proc:
                    root = mnt / "warm" / f"v{ds.seq}"
                    mounted = [str(root / k) for k in objects]
                    for p in mounted:  # cold pass: fills the daemon's cache and the page cache
                        read_os(p)
                    for threads in (1, 8):
                        for name, reader in READERS.items():
                            d_rate, _, _ = measure(disk, reader, threads, None, args.passes)
                            m_rate, cpu_us, reads = measure(mounted, reader, threads, proc.pid, args.passes)
                            print(
                                f"{config:12} {name:6} {threads:>7} {d_rate:>13,.0f} {m_rate:>14,.0f} {m_rate / d_rate:>6.2f} {cpu_us:>15.1f} {reads:>18.2f}"
                            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
