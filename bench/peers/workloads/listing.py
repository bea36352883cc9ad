#!/usr/bin/env python3
"""listing: os.walk over the whole tree, then os.stat every file (single thread).
For s3:// roots: a full recursive ListObjectsV2 (boto3) or fs.find (fsspec) instead.
Reports seconds, entries, stat/s."""

import os

from common import Deadline, base_args, emit, load_manifest, make_store


def main():
    p = base_args(__doc__)
    a = p.parse_args()
    man = load_manifest(a.manifest)
    store = make_store(a)
    dl = Deadline(a.max_seconds)
    if store.kind != "path":
        n = store.list_all()
        el = dl.elapsed()
        emit(
            {
                "ok": n == len(man["entries"]),
                "workload": "listing",
                "files": n,
                "dirs": 0,
                "seconds": el,
                "walk_s": el,
                "stat_s": 0.0,
                "stat_per_s": n / el,
                "capped": False,
            }
        )
        return
    paths, dirs = [], 0
    for d, dn, fn in os.walk(store.root):
        dirs += len(dn)
        paths.extend(os.path.join(d, f) for f in fn)
        if dl.passed():
            break
    walk_s = dl.elapsed()
    statted = 0
    for pth in paths:
        if dl.passed():
            break
        os.stat(pth)
        statted += 1
    el = dl.elapsed()
    emit(
        {
            "ok": len(paths) == len(man["entries"]) and statted == len(paths),
            "workload": "listing",
            "files": len(paths),
            "dirs": dirs,
            "statted": statted,
            "seconds": el,
            "walk_s": walk_s,
            "stat_s": el - walk_s,
            "stat_per_s": statted / el,
            "capped": dl.hit,
        }
    )


if __name__ == "__main__":
    main()
