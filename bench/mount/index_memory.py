#!/usr/bin/env python3
"""Memory and build/lookup speed of the read-only listing index (fuse_adapter.tree) at N entries.

Baseline in the same run: the same listing held as one Python object per entry (a dict
of key -> (size, mtime, url, etag) tuples), which is what a naive index would do.
Usage: bench/mount/index_memory.py [--entries 1000000]
"""

from __future__ import annotations

import argparse
import gc
import random
import time
import tracemalloc

from fuse_adapter.tree import ROOT_INODE, ListingTree


def listing(n: int):
    for i in range(n):
        key = f"train/class_{i % 1000:03d}/img_{i:08d}.jpg"
        yield key, 100_000 + i % 5000, 1_700_000_000.0, f"s3://bucket/{key}", f'"{i:032x}"'


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--entries", type=int, default=1_000_000)
    n = p.parse_args().entries
    entries = sorted(listing(n))

    gc.collect()
    tracemalloc.start()
    t0 = time.perf_counter()
    tree = ListingTree(mtime=0)
    feed = tree.start_feed(ROOT_INODE, "s3://bucket")
    for i in range(0, n, 2000):
        tree.add_files(feed, entries[i : i + 2000])
    tree.finish_feed(feed)
    build_s = time.perf_counter() - t0
    tree_bytes = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()

    rng = random.Random(0)
    probes = [rng.choice(entries)[0] for _ in range(20_000)]
    t0 = time.perf_counter()
    for key in probes:
        ino = ROOT_INODE
        for part in key.split("/"):
            ino = tree.lookup_now(ino, part)
    lookup_us = (time.perf_counter() - t0) / len(probes) / 3 * 1e6

    gc.collect()
    tracemalloc.start()
    naive = {k: (s, m, u, e) for k, s, m, u, e in listing(n)}  # fresh objects, as a loader would hold
    naive_bytes = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del naive

    print(f"entries {n}")
    print(
        f"index: {tree_bytes / n:.0f} bytes/entry traced ({tree.nbytes() / n:.0f} by its own count), "
        f"built in {build_s:.1f}s ({n / build_s:,.0f} entries/s), lookup {lookup_us:.1f} us per path component"
    )
    print(
        f"baseline dict of tuples: {naive_bytes / n:.0f} bytes/entry; ratio {naive_bytes / tree_bytes:.1f}x"
    )


if __name__ == "__main__":
    main()
