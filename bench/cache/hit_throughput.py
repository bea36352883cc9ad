"""RAM-hit and SSD-hit read throughput of the cache, against the plain alternatives.

- RAM hit: ``cache.read`` of pages held by the RAM tier vs a plain memory copy of the same
  bytes (``bytes(bytearray)`` of each page). Goal >= 0.5.
- SSD hit: ``cache.read`` of pages held only by the disk tier (RAM tier off) vs reading the
  same bytes from a local file with ``open().read()``. Goal >= 0.7. Measured twice: with
  the files in the OS page cache (both sides read memory), and cold (each file dropped from
  the page cache with posix_fadvise DONTNEED before every read, so both sides read the disk).

Both sides of every comparison hand their results to the same ``consume``, which drops each
result before asking for the next. (An earlier version let only the cache side keep the
previous 4 MiB result alive while the next was allocated, which makes glibc trim and regrow
its heap: page faults charged to one side only, ~0.05-0.1 of the SSD ratio.) The SSD
page-cache ratio is also printed with both sides holding each result while the next is read,
as a ``for`` loop over the results does; the goal verdict uses the stricter drop-at-once.

Each ratio is measured ``--rounds`` times (each round: baseline and subject alternately,
best of several runs each) and the median is printed with the spread, next to the goal;
for the in-memory comparisons also the ratio of CPU times, steadier on a loaded machine.

Usage: .venv/bin/python bench/cache/hit_throughput.py [--mib 256] [--page-mib 4] [--rounds 3]
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from common import best_of, config_in, header, row

from datahub.cache import open_cache
from datahub.cache.pages import CHECKSUMS, DEFAULT_CHECKSUM, PageKey, header_size
from datahub.storage import StoreRegistry


def consume(results: Iterable[bytes]) -> None:
    """Drop each result before the next is produced (a deque of length 0 keeps none)."""
    collections.deque(results, maxlen=0)


def consume_holding(results: Iterable[bytes]) -> None:
    """A ``for`` loop: each result stays bound to the loop variable while the next is read."""
    for _ in results:
        pass


def read_file(path: Path) -> bytes:
    """The baseline: the simplest way a user reads a local file."""
    with open(path, "rb") as fh:
        return fh.read()


def pread_data(path: str, key: PageKey) -> bytes:
    """The data part of a page file, unchecked: the least any disk hit has to do."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.pread(fd, key.page_size, header_size(key))
    finally:
        os.close(fd)


def drop_from_page_cache(path: Path | str) -> None:
    """Evict a file from the page cache (written back first: DONTNEED keeps dirty pages)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def cold(fn: Callable[[], None], paths: list) -> Callable[[], None]:
    def run() -> None:
        for p in paths:
            drop_from_page_cache(p)
        fn()

    return run


@dataclass
class Rounds:
    """Per round, the best wall time and the best CPU time (this thread's user + system time,
    which other processes on a shared machine disturb less) of (baseline, subject)."""

    wall: list[tuple[float, float]]
    cpu: list[tuple[float, float]]

    def median_times(self) -> tuple[float, float]:
        return statistics.median(b for b, _ in self.wall), statistics.median(s for _, s in self.wall)

    def ratios(self, clock: str = "wall") -> list[float]:
        return sorted(b / s for b, s in getattr(self, clock))


def rounds(baseline: Callable[[], None], subject: Callable[[], None], n: int, repeat: int) -> Rounds:
    """``n`` rounds; in each, baseline and subject run alternately ``repeat`` times each, so a
    burst of load from other processes hits both sides alike."""
    result = Rounds([], [])
    for _ in range(n):
        times: list[list[tuple[float, float]]] = [[], []]
        for _ in range(repeat):
            for side, fn in enumerate((baseline, subject)):
                wall, cpu = time.perf_counter(), time.thread_time()
                fn()
                times[side].append((time.perf_counter() - wall, time.thread_time() - cpu))
        result.wall.append((min(w for w, _ in times[0]), min(w for w, _ in times[1])))
        result.cpu.append((min(c for _, c in times[0]), min(c for _, c in times[1])))
    return result


def verdict(name: str, result: Rounds, goal: float, *, cpu: bool = True) -> str:
    """The median wall-clock ratio against the goal, with every round's and the CPU-time ratio."""
    ratios = result.ratios()
    median = statistics.median(ratios)
    spread = ", ".join(f"{r:.2f}" for r in ratios)
    line = f"{name}: median {median:.2f} (rounds {spread}); goal >= {goal}: {'met' if median >= goal else 'NOT met'}"
    if cpu:
        line += f"; CPU-time ratio median {statistics.median(result.ratios('cpu')):.2f}"
    return line


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=256, help="bytes read per measurement")
    ap.add_argument("--page-mib", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3, help="ratios measured; the median is reported")
    args = ap.parse_args()
    page = args.page_mib * 2**20
    n_pages = args.mib * 2**20 // page
    total = n_pages * page
    header(f"cache hit throughput: {n_pages} pages of {args.page_mib} MiB, median of {args.rounds} rounds")
    print(f"# load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    verdicts = []
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        home = Path(tmp)
        src = home / "origin"
        src.mkdir()
        blob = os.urandom(page)
        for i in range(n_pages):
            (src / f"p{i}.bin").write_bytes(blob[i:] + blob[:i])
        files = [src / f"p{i}.bin" for i in range(n_pages)]

        # --- RAM hits ------------------------------------------------------------------------
        config = config_in(home / "ram", page_size=page, ram_bytes=2 * total, disk_bytes=0, readahead_bytes=0)
        with StoreRegistry(config) as stores, open_cache(config, stores) as cache:
            store = stores.store(src.as_uri())
            refs = [store.ref(f"p{i}.bin") for i in range(n_pages)]
            consume(cache.read(ref) for ref in refs)
            buffers = [bytearray(cache.read(ref)) for ref in refs]

            def copy() -> None:
                consume(bytes(b) for b in buffers)

            r_ram = rounds(copy, lambda: consume(cache.read(ref) for ref in refs), args.rounds, 9)
            r_part = rounds(
                copy, lambda: consume(cache.read(ref, 1, page - 2) for ref in refs), args.rounds, 9
            )
        t_copy, t_ram = r_ram.median_times()
        row("memory copy (baseline)", t_copy, total)
        row("cache.read, RAM hit, whole page", t_ram, total)
        row("cache.read, RAM hit, page minus 2 bytes (a copy)", r_part.median_times()[1], total)
        verdicts.append(verdict("RAM hit (whole page) / memory copy", r_ram, 0.5))
        verdicts.append(verdict("RAM hit (page minus 2 bytes) / memory copy", r_part, 0.5))

        # --- SSD hits ------------------------------------------------------------------------
        config = config_in(home / "ssd", page_size=page, ram_bytes=0, disk_bytes=4 * total, readahead_bytes=0)
        with StoreRegistry(config) as stores, open_cache(config, stores) as cache:
            store = stores.store(src.as_uri())
            refs = [store.ref(f"p{i}.bin") for i in range(n_pages)]
            consume(cache.read(ref) for ref in refs)
            [disk] = cache.tiers
            keys = list(disk._sizes)
            page_files = [disk._path(k) for k in keys]

            def read_files() -> None:
                consume(read_file(f) for f in files)

            def read_cache() -> None:
                consume(cache.read(ref) for ref in refs)

            r_warm = rounds(read_files, read_cache, args.rounds, 9)
            r_hold = rounds(
                lambda: consume_holding(read_file(f) for f in files),
                lambda: consume_holding(cache.read(ref) for ref in refs),
                args.rounds,
                9,
            )
            # where a hit's time goes: the copy out of the page cache (which the baseline pays
            # too), the checksum of the bytes just copied (so in the CPU cache), the rest
            t_load = best_of(lambda: consume(disk._load(k) for k in keys), 9)
            t_pread = best_of(
                lambda: consume(pread_data(p, k) for p, k in zip(page_files, keys, strict=True)), 9
            )
            checksum, one_page = CHECKSUMS[DEFAULT_CHECKSUM], read_file(files[0])
            t_sum = best_of(lambda: consume(checksum(one_page) for _ in keys), 9)
            r_cold = rounds(cold(read_files, files), cold(read_cache, page_files), args.rounds, 5)
            assert disk.counters.hits >= 3 * n_pages and disk.counters.corrupt == 0
        t_file, t_ssd = r_warm.median_times()
        row("local file read, page cache (baseline)", t_file, total)
        row("cache.read, SSD hit, page cache", t_ssd, total)
        row("  disk tier _load alone (open, 2 preads, check)", t_load, total)
        row("  open + pread of the page data alone", t_pread, total)
        row(f"  {DEFAULT_CHECKSUM} of one page in the CPU cache, x{n_pages}", t_sum, total)
        t_file_cold, t_ssd_cold = r_cold.median_times()
        row("local file read, cold (baseline)", t_file_cold, total)
        row("cache.read, SSD hit, cold", t_ssd_cold, total)
        verdicts.append(verdict("SSD hit / local read, page cache", r_warm, 0.7))
        verdicts.append(
            verdict("  the same, both sides holding each result while reading the next", r_hold, 0.7)
        )
        verdicts.append(
            verdict("SSD hit / local read, cold", r_cold, 0.7, cpu=False)
        )  # CPU time excludes I/O
    print(f"# load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for line in verdicts:
        print(line)


if __name__ == "__main__":
    main()
