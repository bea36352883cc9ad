#!/usr/bin/env python3
"""large sequential: read one large file start to end with fixed-size reads (1 MiB). Reports MiB/s."""

from common import Deadline, MiB, base_args, emit, larges, load_manifest, make_store


def main():
    p = base_args(__doc__)
    p.add_argument("--index", type=int, default=0, help="which large file")
    p.add_argument("--read-kib", type=int, default=1024)
    a = p.parse_args()
    e = larges(load_manifest(a.manifest))[a.index]
    store = make_store(a)
    dl = Deadline(a.max_seconds)
    n, bs = 0, a.read_kib * 1024
    f = store.open_seq(e["key"])
    while not dl.passed():
        b = f.read(bs)
        if not b:
            break
        n += len(b)
    f.close()
    el = dl.elapsed()
    emit(
        {
            "ok": n == e["size"] or dl.hit,
            "workload": "large_seq",
            "bytes": n,
            "of": e["size"],
            "seconds": el,
            "mib_per_s": n / MiB / el,
            "capped": dl.hit,
            "read_kib": a.read_kib,
        }
    )


if __name__ == "__main__":
    main()
