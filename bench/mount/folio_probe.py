"""How the page cache holds small files read through the mount and on local disk, by the
way they were filled (issue 36, item 1: large folios).

    .venv/bin/python bench/mount/folio_probe.py [--files 200] [--configs zero-msg,passthrough]

A copy out of one large folio is one long copy and one page-cache look-up; out of order-0
pages, one per 4 KiB (warm7: the local copy as written sits in large folios and read 3.5x
cheaper per file than the same files filled by reads). This asks, on this kernel, which
ways of filling the page cache give large folios, for the local copy, for the FUSE inodes
of a mount (zero-message opens: filled by READs) and for the disk tier's page files (what
passthrough serves): as written; after ``drop_caches`` and a ``read()`` of each file (what
a training epoch does); after ``drop_caches`` and ``posix_fadvise(WILLNEED)``; after
``drop_caches`` and a mapping with ``MADV_HUGEPAGE`` touched page by page. Prints pages in
large folios and order-0 pages for each (``warm_anatomy.folios``: /proc/kpageflags). Needs
root (drop_caches, /proc/kpageflags).
"""

from __future__ import annotations

import argparse
import mmap
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.mount.common import dataset_bench, drop_caches, header, load, read_py, tiered_mount
from bench.mount.warm_anatomy import folios
from bench.mount.warm_path import CONFIGS
from tests.pagecache import resident_pages


def fill_read(paths: list[str]) -> None:
    """A training epoch's way: each file read whole with read()."""
    for p in paths:
        read_py(p)


def fill_willneed(paths: list[str]) -> None:
    """``posix_fadvise(WILLNEED)`` on each file, then a read (the read finds it cached)."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        finally:
            os.close(fd)
    fill_read(paths)


def fill_hugepage_map(paths: list[str]) -> None:
    """Each file mapped shared with ``MADV_HUGEPAGE`` and touched page by page: the fault's
    readahead asks for PMD-order folios where the mapping allows large folios."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            m = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
        m.madvise(mmap.MADV_HUGEPAGE)
        for i in range(0, size, mmap.PAGESIZE):
            m[i]
        m.close()


def resident(paths: list[str]) -> str:
    """``folios`` of the files wholly resident (mincore first, so that counting does not
    fault in pages of a file that is not cached, e.g. page files after READs in C dropped
    them), and how many files were not."""
    cached = [p for p in paths if resident_pages(Path(p)) == -(-os.path.getsize(p) // mmap.PAGESIZE)]
    return f"{folios(cached)} ({len(paths) - len(cached)} of {len(paths)} files not wholly resident)"


FILLS = {"read": fill_read, "willneed": fill_willneed, "madv-hugepage": fill_hugepage_map}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=200)
    ap.add_argument("--configs", default="zero-msg,passthrough")
    args = ap.parse_args()
    with dataset_bench("folio-probe", "fp", args.files, 25, ram_bytes=0) as data:
        header("folio_probe", f"{args.files} files (50-200 KB), {load()}")
        print(f"local disk, as written: {folios(data.disk_paths)}")
        for fill_name, fill in FILLS.items():
            drop_caches(1)
            fill(data.disk_paths)
            print(f"local disk, drop_caches then {fill_name}: {folios(data.disk_paths)}")
        for config in args.configs.split(","):
            flags = CONFIGS[config]
            with tiered_mount(data, config, flags) as (_proc, _mnt, paths):
                pages = sorted(str(p) for p in data.env.root.rglob("*.page"))
                print(f"# {config}: datahub mount {' '.join(flags) or '(default flags)'}; {load()}")
                print(f"{config}: after the cold pass, mount: {folios(paths)}; page files: {resident(pages)}")
                for fill_name, fill in FILLS.items():
                    drop_caches(1)
                    fill(paths)
                    print(
                        f"{config}: drop_caches then {fill_name}, mount: {folios(paths)}; "
                        f"page files: {resident(pages)}"
                    )


if __name__ == "__main__":
    main()
