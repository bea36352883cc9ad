"""Does a file system move the ctime where LocalStore's etag needs it to (docs/storage.md)?

    .venv/bin/python bench/storage/ctime_probe.py DIR [DIR ...] [--replacements 500]

In each directory (a mount of the file system to probe), a 4 KiB file is replaced
``--replacements`` times the way ``cp -p`` replaces a same-size file of an equal mtime
(written in place, then its mtime set back) and counts how often the ctime stayed the same
(each such replacement would keep the etag ``<inode>-<size>-<mtime_ns>-<ctime_ns>``). Then:
whether a read, a stat and a ``listxattr`` moved it (they must not: a file nobody touched
keeps its etag) and whether a rename moved it (``LocalStore.put`` takes its etag after its
rename, so either way is fine). Prints the kernel release, since coarse ctime clocks are a
property of kernels before 6.13.
"""

from __future__ import annotations

import argparse
import os
import platform


def probe(directory: str, replacements: int) -> str:
    path = os.path.join(directory, ".ctime-probe.bin")
    with open(path, "wb") as fh:
        fh.write(b"x" * 4096)
    try:
        kept = 0
        for i in range(replacements):
            st = os.stat(path)
            with open(path, "r+b") as fh:
                fh.write(bytes([i % 256]) * 4096)
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
            kept += os.stat(path).st_ctime_ns == st.st_ctime_ns
        before = os.stat(path)
        with open(path, "rb") as fh:
            fh.read()
        os.listxattr(path)
        untouched = os.stat(path).st_ctime_ns == before.st_ctime_ns
        other = path + ".new"
        with open(other, "wb") as fh:
            fh.write(b"y")
        written = os.stat(other)
        os.replace(other, path)
        renamed = os.stat(path).st_ctime_ns != written.st_ctime_ns
    finally:
        os.unlink(path)
    return (
        f"{directory}: {kept}/{replacements} replacements kept the ctime; "
        f"read/stat/listxattr kept it: {untouched}; rename moved it: {renamed}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dirs", nargs="+")
    parser.add_argument("--replacements", type=int, default=500)
    args = parser.parse_args()
    print(f"kernel {platform.release()}")
    for directory in args.dirs:
        print(probe(directory, args.replacements))


if __name__ == "__main__":
    main()
