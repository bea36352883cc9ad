#!/usr/bin/env python3
"""large random: K random reads of 128 KiB (4 KiB aligned, fixed seed) in one large file, one thread.
Reports reads/s and per-read latency."""

import random
import time

from common import Deadline, base_args, emit, larges, load_manifest, make_store, pct


def main():
    p = base_args(__doc__)
    p.add_argument("--index", type=int, default=1, help="which large file")
    p.add_argument("--reads", type=int, default=2000)
    p.add_argument("--read-kib", type=int, default=128)
    a = p.parse_args()
    e = larges(load_manifest(a.manifest))[a.index]
    n = a.read_kib * 1024
    rng = random.Random(a.seed)
    offs = [rng.randrange(0, (e["size"] - n) // 4096) * 4096 for _ in range(a.reads)]
    store = make_store(a)
    dl = Deadline(a.max_seconds)
    rd, close = store.open_random(e["key"])
    lat, short = [], 0
    for off in offs:
        if dl.passed():
            break
        t = time.perf_counter()
        b = rd(off, n)
        lat.append(time.perf_counter() - t)
        short += len(b) != n
    close()
    el = dl.elapsed()
    emit(
        {
            "ok": short == 0,
            "workload": "large_rand",
            "reads": len(lat),
            "of": a.reads,
            "seconds": el,
            "reads_per_s": len(lat) / el,
            "capped": dl.hit,
            "lat_p50_ms": 1e3 * pct(lat, 0.5),
            "lat_p99_ms": 1e3 * pct(lat, 0.99),
            "short_reads": short,
            "read_kib": a.read_kib,
        }
    )


if __name__ == "__main__":
    main()
