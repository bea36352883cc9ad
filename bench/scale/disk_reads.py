"""What the disk under a large catalog gives a spread commit: random page reads by queue depth
and sequential reads, cold (issue 38 item 3).

    .venv/bin/python bench/scale/disk_reads.py FILE [--seconds 4] [--depths 1,4,16,32]

A spread 1 % commit of 10⁸ records reads one leaf page per change (docs/catalog.md, "Eighth
pass"). Whether reading them with more reads in flight, or reading the whole range the leaves
span in large sequential reads, could be faster is the disk's answer: this reads ``FILE``
(the catalog) after evicting it from the page cache, ``--seconds`` per row: 4 KiB ``pread``s
at random page offsets from N threads (``POSIX_FADV_RANDOM``, so the kernel reads no more
than asked), then 1 GiB in 128 KiB and 1 GiB elsewhere in 1 MiB reads. Each row prints reads per second
and the CPU per 4 KiB page, with the load (the machine is shared: wall rates move with it).
"""

from __future__ import annotations

import argparse
import os
import random
import threading
import time
from pathlib import Path


def evict(fd: int) -> None:
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def random_reads(fd: int, size: int, depth: int, seconds: float) -> None:
    evict(fd)
    counts = [0] * depth
    stop = time.perf_counter() + seconds

    def run(i: int) -> None:
        rng = random.Random(i)
        while time.perf_counter() < stop:
            os.pread(fd, 4096, rng.randrange(size // 4096) * 4096)
            counts[i] += 1

    c0, t0 = os.times(), time.perf_counter()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(depth)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall, c1, n = time.perf_counter() - t0, os.times(), sum(counts)
    print(
        f"random 4 KiB reads, {depth:2d} in flight: {n / wall:8,.0f} reads/s, "
        f"CPU {(c1.user - c0.user + c1.system - c0.system) / n * 1e6:5.1f} µs per read "
        f"(system {(c1.system - c0.system) / n * 1e6:.1f}); load {os.getloadavg()[0]:.1f}",
        flush=True,
    )


def sequential_reads(fd: int, size: int, block: int, start: int) -> None:
    """1 GiB from ``start`` (each block size its own region: a virtual disk's host may cache
    what was read a moment ago, whatever this guest evicted)."""
    evict(fd)
    start = min(start, max(0, size - 2**30))
    c0, t0, n = os.times(), time.perf_counter(), 0
    while n < min(2**30, size - start):
        got = len(os.pread(fd, block, start + n))
        if not got:
            break
        n += got
    wall, c1 = time.perf_counter() - t0, os.times()
    print(
        f"sequential {block >> 10:5d} KiB reads: {n / wall / 2**20:8,.0f} MiB/s = {n / 4096 / wall:8,.0f} pages/s, "
        f"CPU {(c1.user - c0.user + c1.system - c0.system) / (n / 4096) * 1e6:5.2f} µs per 4 KiB page; "
        f"load {os.getloadavg()[0]:.1f}",
        flush=True,
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", type=Path)
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--depths", default="1,4,16,32")
    args = p.parse_args()
    fd = os.open(args.file, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        print(
            f"bench/scale/disk_reads.py: {size / 2**30:.1f} GiB; {time.strftime('%H:%M:%S UTC', time.gmtime())}"
        )
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        for depth in map(int, args.depths.split(",")):
            random_reads(fd, size, depth, args.seconds)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        for block, start in ((128 << 10, size * 3 // 8), (1 << 20, size * 5 // 8)):
            sequential_reads(fd, size, block, start // 4096 * 4096)
    finally:
        evict(fd)
        os.close(fd)


if __name__ == "__main__":
    main()
