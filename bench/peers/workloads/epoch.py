#!/usr/bin/env python3
"""epoch: read every image once, shuffled (fixed seed), with N reader threads. Reports files/s, MiB/s."""

import random
import time
from concurrent.futures import ThreadPoolExecutor

from common import Deadline, MiB, base_args, emit, images, load_manifest, make_store, pct


def main():
    p = base_args(__doc__)
    p.add_argument("--threads", type=int, default=8)
    a = p.parse_args()
    man = load_manifest(a.manifest)
    files = images(man)
    random.Random(a.seed).shuffle(files)
    store = make_store(a)
    dl = Deadline(a.max_seconds)
    lat, bad = [], []

    def one(e):
        if dl.passed():
            return 0
        t = time.perf_counter()
        n = len(store.read_all(e["key"]))
        lat.append(time.perf_counter() - t)
        if n != e["size"]:
            bad.append(e["key"])
        return n

    with ThreadPoolExecutor(a.threads) as ex:
        nbytes = sum(ex.map(one, files))
    el = dl.elapsed()
    done = len(lat)
    emit(
        {
            "ok": not bad,
            "workload": "epoch",
            "files": done,
            "of": len(files),
            "bytes": nbytes,
            "seconds": el,
            "files_per_s": done / el,
            "mib_per_s": nbytes / MiB / el,
            "capped": dl.hit,
            "lat_p50_ms": 1e3 * pct(lat, 0.5),
            "lat_p99_ms": 1e3 * pct(lat, 0.99),
            "size_mismatch": len(bad),
            "threads": a.threads,
        }
    )


if __name__ == "__main__":
    main()
