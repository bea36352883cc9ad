"""RAM-hit and SSD-hit read throughput of the cache, against the plain alternatives.

- RAM hit: ``cache.read`` of pages held by the RAM tier vs a plain memory copy of the same
  bytes (``bytes(bytearray)`` of each page). Goal >= 0.5.
- SSD hit: ``cache.read`` of pages held only by the disk tier (RAM tier off) vs reading the
  same bytes from a local file with ``open().read()``. Goal >= 0.7. Measured twice: with
  the files in the OS page cache (both sides read memory), and cold (each file dropped from
  the page cache with posix_fadvise DONTNEED before every read, so both sides read the disk).

Usage: .venv/bin/python bench/cache/hit_throughput.py [--mib 256] [--page-mib 4]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from common import best_of, compare, config_in, header, row

from datahub.cache import open_cache
from datahub.cache.pages import CHECKSUMS, DEFAULT_CHECKSUM
from datahub.storage import StoreRegistry


def consume(results) -> None:
    """Drop each result at once, as a reader does (keeping them all would time page faults)."""
    for _ in results:
        pass


def drop_from_page_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=256, help="bytes read per measurement")
    ap.add_argument("--page-mib", type=int, default=4)
    args = ap.parse_args()
    page = args.page_mib * 2**20
    n_pages = args.mib * 2**20 // page
    total = n_pages * page
    header(f"cache hit throughput: {n_pages} pages of {args.page_mib} MiB")
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        home = Path(tmp)
        src = home / "origin"
        src.mkdir()
        blob = os.urandom(page)
        for i in range(n_pages):
            (src / f"p{i}.bin").write_bytes(blob[i:] + blob[:i])

        # --- RAM hits ------------------------------------------------------------------------
        config = config_in(home / "ram", page_size=page, ram_bytes=2 * total, disk_bytes=0, readahead_pages=0)
        with StoreRegistry(config) as stores, open_cache(config, stores) as cache:
            store = stores.store(src.as_uri())
            refs = [store.ref(f"p{i}.bin") for i in range(n_pages)]
            for ref in refs:
                cache.read(ref)
            buffers = [bytearray(cache.read(ref)) for ref in refs]
            copy = lambda: consume(bytes(b) for b in buffers)  # noqa: E731
            t_copy, t_ram = compare(copy, lambda: consume(cache.read(ref) for ref in refs))
            t_copy2, t_ram_part = compare(copy, lambda: consume(cache.read(ref, 1, page - 2) for ref in refs))
            t_copy = min(t_copy, t_copy2)
        row("memory copy (baseline)", t_copy, total)
        row("cache.read, RAM hit, whole page", t_ram, total, f"ratio {t_copy / t_ram:.2f}")
        row(
            "cache.read, RAM hit, page minus 2 bytes (a copy)",
            t_ram_part,
            total,
            f"ratio {t_copy / t_ram_part:.2f}",
        )

        # --- SSD hits ------------------------------------------------------------------------
        config = config_in(home / "ssd", page_size=page, ram_bytes=0, disk_bytes=4 * total, readahead_pages=0)
        with StoreRegistry(config) as stores, open_cache(config, stores) as cache:
            store = stores.store(src.as_uri())
            refs = [store.ref(f"p{i}.bin") for i in range(n_pages)]
            for ref in refs:
                cache.read(ref)
            [disk] = cache.tiers
            files = [src / f"p{i}.bin" for i in range(n_pages)]
            page_files = [disk._path(k) for k in disk._sizes]

            def read_files() -> None:
                for f in files:
                    with open(f, "rb") as fh:
                        fh.read()

            t_file, t_ssd = compare(read_files, lambda: consume(cache.read(ref) for ref in refs))
            blobs = [f.read_bytes() for f in files]
            t_sum = best_of(lambda: consume(CHECKSUMS[DEFAULT_CHECKSUM](b) for b in blobs))

            def cold(fn, paths):
                def run():
                    for p in paths:
                        drop_from_page_cache(p)
                    fn()

                return run

            t_file_cold, t_ssd_cold = compare(
                cold(read_files, files),
                cold(lambda: consume(cache.read(ref) for ref in refs), page_files),
                repeat=5,
            )
            assert disk.counters.hits >= 3 * n_pages
        row("local file read, page cache (baseline)", t_file, total)
        row("cache.read, SSD hit, page cache", t_ssd, total, f"ratio {t_file / t_ssd:.2f}")
        row(
            f"  of which: {DEFAULT_CHECKSUM} of the same bytes",
            t_sum,
            total,
            f"{t_sum / t_ssd:.0%} of the SSD hit",
        )
        row("local file read, cold (baseline)", t_file_cold, total)
        row("cache.read, SSD hit, cold", t_ssd_cold, total, f"ratio {t_file_cold / t_ssd_cold:.2f}")


if __name__ == "__main__":
    main()
