"""Where a reader's CPU goes in a pass through the mount against the same pass on local
disk (issue 36: the single-thread warm and SSD-hit gaps that no daemon request explains).

    .venv/bin/python bench/mount/warm_anatomy.py [--files 2000] [--rounds 3] [--freq 4999]
                                                 [--kind warm|ssd-hit] [--reader buffered|open]
                                                 [--configs zero-msg,default] [--keep DIR]

Uploads ``--files`` objects of 50-200 KB (bench/mount/common.py), mounts each configuration
(``--configs``, warm_path.py's names) and, for ``--rounds`` rounds, reads every file whole in
a shuffled order with one thread, first from the local-disk copy, then through the mount,
each pass under its own ``perf record -g -p <this process>`` (``--keep``: the perf.data files
are kept there, for call graphs). *warm*: after the warming epochs (the automatic mode: until
it switched), both page caches are dropped and filled again by reads, so that both hold
order-0 pages (the local copy as written sits in large folios; :func:`folios` prints how each
is held), then nothing is dropped; *ssd-hit*: right after the mount's cold pass (as
warm_path's ssd-hit rows: the automatic mode stays in passthrough), ``drop_caches 1`` before
each pass. Printed per configuration: files/s and the reader's CPU per file (perf's samples
over ``--freq``), the kernel entry points' inclusive CPU per file (open, read, close, fstat,
lseek...), then the symbols whose self CPU per file differs most between the mount and local
disk, all means over the rounds. ``uptime`` load is printed with each configuration: the
machine may be shared. Needs root (perf on the kernel, drop_caches, /proc/kpageflags).
"""

from __future__ import annotations

import argparse
import ctypes
import mmap
import os
import random
import re
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.mount.common import dataset_bench, drop_caches, header, load, read_all, read_py, tiered_mount
from bench.mount.warm_path import CONFIGS, automatic, read_buffered

#: kernel entry points whose inclusive CPU is printed (callers' frames: each counted once)
ENTRIES = (
    "do_sys_openat2",
    "path_openat",
    "link_path_walk",
    "do_open",
    "vfs_open",
    "fuse_open",
    "ext4_file_open",
    "vfs_read",
    "filemap_read",
    "filemap_get_read_batch",
    "copy_page_to_iter",
    "fuse_file_read_iter",
    "ext4_file_read_iter",
    "__x64_sys_close",
    "__fput",
    "fuse_flush",
    "fuse_release",
    "vfs_fstat",
    "vfs_getattr",
    "ksys_lseek",
    "__x64_sys_ioctl",
)
READERS = {"buffered": read_buffered, "open": read_py}
_CHILDREN = re.compile(r"^\s*([\d.]+)%\s+[\d.]+%\s+\[[.k]\]\s+(\S+)")  # children%, self%, symbol
_SELF = re.compile(r"^\s*[\d.]+%\s+(\d+)\s+\[[.k]\]\s+(\S+)")  # self%, samples, symbol


def profiled_pass(
    paths: list[str], reader, freq: int, keep: str | None = None
) -> tuple[float, dict[str, float], dict[str, float], int]:
    """One single-thread pass under ``perf record -g`` of this process: (seconds, inclusive
    and self samples per symbol, all samples)."""
    with tempfile.NamedTemporaryFile(suffix=".perf", delete=False) as f:
        data = f.name
    perf = subprocess.Popen(
        ["perf", "record", "-q", "-g", "-F", str(freq), "-p", str(os.getpid()), "-o", data],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(0.5)  # perf attached
    secs = read_all(paths, 1, reader)
    perf.send_signal(signal.SIGINT)
    perf.wait()
    try:
        report = ["perf", "report", "-i", data, "--stdio", "--sort", "sym", "-g", "none", "-q"]
        children = subprocess.run([*report, "--children"], capture_output=True, text=True, check=True).stdout
        selfs = subprocess.run(
            [*report, "--no-children", "-n"], capture_output=True, text=True, check=True
        ).stdout
    finally:
        if keep:
            os.replace(data, keep)  # for perf report -i KEEP (call graphs)
        else:
            os.unlink(data)
    own: dict[str, float] = {}  # samples
    for line in selfs.splitlines():
        m = _SELF.match(line)
        if m:
            own[m.group(2)] = float(m.group(1))
    total = sum(own.values())
    inclusive: dict[str, float] = {}
    for line in children.splitlines():
        m = _CHILDREN.match(line)
        if m:
            inclusive[m.group(2)] = float(m.group(1)) / 100 * total
    return secs, inclusive, own, int(total)


def folios(paths: list[str]) -> str:
    """How the page cache holds these files: pages in large folios (a head or tail page of a
    compound page, /proc/kpageflags) and pages on their own. Each file is mapped (private,
    never written: its page-cache pages), touched, and its pages' frames looked up in
    /proc/self/pagemap. A copy out of one large folio is one long copy; out of order-0 pages,
    one per 4 KiB."""
    large = single = 0
    with (
        open("/proc/self/pagemap", "rb", buffering=0) as pm,
        open("/proc/kpageflags", "rb", buffering=0) as kf,
    ):
        for path in paths:
            fd = os.open(path, os.O_RDONLY)
            try:
                size = os.fstat(fd).st_size
                m = mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
            finally:
                os.close(fd)
            view = ctypes.c_char.from_buffer(m)
            pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
            for i in range(pages):
                m[i * mmap.PAGESIZE]  # mapped now: a page-cache hit, no request
            pm.seek(ctypes.addressof(view) // mmap.PAGESIZE * 8)
            entries = pm.read(8 * pages)
            del view
            m.close()
            for (entry,) in struct.iter_unpack("<Q", entries):
                if entry >> 63:  # present
                    kf.seek((entry & ((1 << 55) - 1)) * 8)
                    (flags,) = struct.unpack("<Q", kf.read(8))
                    if flags & (1 << 15 | 1 << 16):  # KPF_COMPOUND_HEAD, KPF_COMPOUND_TAIL
                        large += 1
                    else:
                        single += 1
    return f"{large} pages in large folios, {single} order-0"


class Totals:
    """Sums over the rounds of one target (local disk or a mount)."""

    def __init__(self) -> None:
        self.secs = 0.0
        self.samples = 0
        self.inclusive: dict[str, float] = defaultdict(float)  # samples
        self.own: dict[str, float] = defaultdict(float)

    def add(self, secs: float, inclusive: dict[str, float], own: dict[str, float], samples: int) -> None:
        self.secs += secs
        self.samples += samples
        for k, v in inclusive.items():
            self.inclusive[k] += v
        for k, v in own.items():
            self.own[k] += v

    def us(self, samples: float, files: int, freq: int) -> float:
        """CPU µs per file of ``samples`` perf samples."""
        return samples / freq / files * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--freq", type=int, default=4999)
    ap.add_argument("--kind", choices=("warm", "ssd-hit"), default="warm")
    ap.add_argument("--reader", choices=tuple(READERS), default="buffered")
    ap.add_argument("--configs", default="zero-msg")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--keep", help="directory: keep each pass's perf.data there (CONFIG-TARGET-ROUND.perf)")
    args = ap.parse_args()
    reader = READERS[args.reader]
    with dataset_bench("warm-anatomy", "wa", args.files, 25, ram_bytes=0) as data:
        header(
            "warm_anatomy",
            f"{args.files} files (50-200 KB), {args.kind} passes, reader {args.reader}, 1 thread, "
            f"{args.rounds} rounds of local disk then mount, perf -F {args.freq}",
        )
        for config in args.configs.split(","):
            flags = CONFIGS[config]
            with tiered_mount(data, config, flags) as (_proc, _mnt, paths):
                for _ in range(0 if args.kind == "ssd-hit" else 6 if automatic(flags) else 1):
                    read_all(random.sample(paths, len(paths)), 1, read_py)  # the switch, then its epoch
                    time.sleep(1.2)
                # both page caches filled by reads (readahead), as warm_path's warm rows find
                # them after its ssd-hit rows; the local copy as written sits in large folios
                if args.kind == "warm":  # (an ssd-hit row starts right after the cold pass, as in warm_path)
                    drop_caches(1)
                    for p in data.disk_paths:
                        read_py(p)
                    read_all(paths, 1, read_py)
                    print(f"# disk: {folios(data.disk_paths[:200])}; mount: {folios(paths[:200])}")
                print(
                    f"# {config}: datahub mount {' '.join(flags) or '(default flags)'}; {load()}", flush=True
                )
                disk, mount = Totals(), Totals()
                for i in range(args.rounds):
                    for name, target, totals in (("disk", data.disk_paths, disk), ("mount", paths, mount)):
                        order = random.sample(target, len(target))
                        if args.kind == "ssd-hit":
                            drop_caches(1)
                        keep = os.path.join(args.keep, f"{config}-{name}-{i}.perf") if args.keep else None
                        totals.add(*profiled_pass(order, reader, args.freq, keep))
                n = args.files * args.rounds
                print(
                    f"# files/s: disk {n / disk.secs:,.0f}, mount {n / mount.secs:,.0f} "
                    f"(ratio {disk.secs / mount.secs:.2f}); reader CPU µs per file (perf samples): "
                    f"disk {disk.us(disk.samples, n, args.freq):.1f}, mount {mount.us(mount.samples, n, args.freq):.1f}; {load()}"
                )
                print(f"{'entry point (inclusive)':32} {'disk us':>8} {'mount us':>8}")
                for name in ENTRIES:
                    a, b = (
                        disk.us(disk.inclusive[name], n, args.freq),
                        mount.us(mount.inclusive[name], n, args.freq),
                    )
                    if a or b:
                        print(f"{name:32} {a:8.2f} {b:8.2f}")
                names = set(disk.own) | set(mount.own)
                diff = sorted(
                    names,
                    key=lambda s: (
                        -abs(mount.us(mount.own[s], n, args.freq) - disk.us(disk.own[s], n, args.freq))
                    ),
                )
                print(f"{'symbol (self)':32} {'disk us':>8} {'mount us':>8}")
                for name in diff[: args.top]:
                    print(
                        f"{name[:32]:32} {disk.us(disk.own[name], n, args.freq):8.2f} "
                        f"{mount.us(mount.own[name], n, args.freq):8.2f}"
                    )


if __name__ == "__main__":
    main()
