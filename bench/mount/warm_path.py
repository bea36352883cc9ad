"""Warm epochs and SSD-tier hits through one mount, every read mode side by side (issue 36).

    .venv/bin/python bench/mount/warm_path.py [--files 4000] [--passes 3] [--drop 1|3]
                                              [--configs default,passthrough,...] [--bucket]

Uploads ``--files`` objects of 50-200 KB to a moto server on loopback and mounts the
version (``--bucket``: their bucket URL, a bucket mount) with the real ``datahub mount ...
--foreground`` daemon, **RAM tier off**, so every
read the kernel sends is a disk-tier hit. The first mount's cold pass fills the disk tier;
then, for each configuration in turn (``CONFIGS``: the mount's read modes and transports),
each row in ``--passes`` **rounds of a local-disk pass then a mount pass** (the ratio's
baseline, measured at the same moment, so both see the same machine load: local disk's own
rate swings with the load as much as the mount's):

- *ssd-hit*: ``drop_caches`` (``--drop``: 3 also drops dentries, so each file also costs a
  LOOKUP, answered in C once known), then every file read whole in a shuffled order;
- *warm*: the same without dropping anything (the page cache holds every file);

each with Python's default ``open(p, "rb")`` (3.11: an ``isatty()`` ioctl per file) and a
buffered open (``open(p, "rb", buffering=1 << 20)``: no ioctl; datahub.torch's readers), 1
and 8 threads (``--kinds`` and ``--threads`` pick a subset). Printed per row: the best
files/s of the mount and of local disk over the rounds, their ratio ("ratio", issue 13's
best-of-N) and the median of the rounds' own mount/disk ratios ("pairs": each of passes a
second apart), the readers' CPU per file on local disk and on
the mount (this process, getrusage: work passthrough leaves in the reader, the page
file's disk read and copy, shows here), the daemon's CPU per file (utime+stime,
/proc/PID/stat; reader + daemon is what a file costs the machine) and of it the Python
threads' ("py us", the rest is the C threads'; "py max": its worst pass, where a full GC
collection shows; the daemon's own count of those is printed per configuration), the readers' context
switches per file on local disk and on the mount (each request a reader waits for is one),
all means over the timed passes, for
ssd-hit the growth of ``Cached`` per byte read (1.0: each byte cached once), and the FUSE
requests per file by opcode from the kernel's tracepoint (one more, untimed pass). Before the
warm rows: how the local copy's page cache holds it (``warm_anatomy.folios``): as written, in
large folios, which copy out faster than the order-0 pages readahead leaves (the mount's, and
local disk's after an ssd-hit row dropped them).
``uptime`` load is printed with every configuration: the
machine may be shared.

To compare two checkouts (say, a change to fastread.h, or to the daemon's Python) in one
run, alternately:
``--baseline-python OTHER/.venv/bin/python --configs default@base,default,default@base,default``
(a name ending in ``@base`` runs the daemon of that configuration with the other
interpreter, so with its pyfuse3 and, as it is started with ``PYTHONSAFEPATH=1`` (this
tree, its working directory, not first on its path), with the Python code that interpreter
has installed: OTHER's own when OTHER's .venv installed it in editable mode). With
``PYTHONPATH=bench/mount/gc_probe`` every full GC collection of every process of the run (the
daemons, the base's too, inherit it) is logged with its duration to ``$GC_PROBE_DIR``: the
spikes ``gc.freeze()`` removes, counted for daemons whose code does not report them.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.mount.common import (
    add_configs_option,
    cached_bytes,
    chosen_configs,
    daemon_cpu,
    dataset_bench,
    drop_caches,
    header,
    load,
    read_all,
    read_py,
    tiered_mount,
)
from tests.fuse.fuse_tracepoint import FuseRequests, per_file

BUFFER = 1 << 20  # datahub.torch.files.OPEN_BUFFER


def read_buffered(path: str) -> int:
    """An explicit buffer size: Python's open() then asks no isatty() (datahub.torch's readers)."""
    with open(path, "rb", buffering=BUFFER) as f:
        return len(f.read())


@contextmanager
def daemon_python(python: str) -> Iterator[None]:
    """Mounts started in this block run their daemon with ``python`` (tests/fuse/conftest.py
    starts ``sys.executable -m fuse_adapter`` in this tree), hence with its pyfuse3 build;
    another interpreter's daemon also imports that interpreter's installed code, not this
    tree's (PYTHONSAFEPATH: ``-m`` then puts no working directory first on the path)."""
    saved, sys.executable = sys.executable, python
    other = python != saved
    if other:
        os.environ["PYTHONSAFEPATH"] = "1"
    try:
        yield
    finally:
        sys.executable = saved
        if other:
            os.environ.pop("PYTHONSAFEPATH", None)


def own_cpu() -> tuple[float, int]:
    """CPU seconds (user + system) and context switches (voluntary + involuntary) of this
    process's threads so far: the readers'. A request a reader waits for costs it a switch."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime, r.ru_nvcsw + r.ru_nivcsw


def python_cpu(pid: int | None) -> dict[str, int]:
    """CPU ns so far of each of the daemon's Python threads (every thread not named
    ``pyfuse3-*``, the C reader and ring threads), by thread id: what of "dm us" is
    Python's (:func:`python_cpu_since`)."""
    out: dict[str, int] = {}
    if pid is None:
        return out
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            if not (task / "comm").read_text().startswith("pyfuse3-"):
                out[task.name] = int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError):  # the thread ended
            pass
    return out


def python_cpu_since(before: dict[str, int], pid: int | None) -> float:
    """CPU seconds of the daemon's Python threads since ``before`` (:func:`python_cpu`):
    threads that ended meanwhile are not counted (a thread's schedstat goes with it)."""
    return sum(ns - before.get(tid, 0) for tid, ns in python_cpu(pid).items()) / 1e9


@dataclass
class Row:
    """One row's figures (:func:`main`'s ``measure``): files/s are bests, CPU seconds and
    context switches are summed over the passes until :meth:`scale` turns them into means
    per file (µs, switches)."""

    rate: float = 0.0  # the mount's best files/s
    base: float = 0.0  # local disk's best files/s
    pairs: list[float] = field(default_factory=list)  # each round's mount/disk ratio
    disk_us: float = 0.0
    rd_us: float = 0.0
    dm_us: float = 0.0
    py_us: float = 0.0
    py_max: float = 0.0  # the daemon's Python µs per file in its worst pass (a full GC collection shows here)
    disk_cs: float = 0.0
    rd_cs: float = 0.0
    growth: float = 0.0

    def scale(self, files: int) -> None:
        for name in ("disk_us", "rd_us", "dm_us", "py_us"):
            setattr(self, name, getattr(self, name) * 1e6 / files)
        self.disk_cs /= files
        self.rd_cs /= files


def gc_counts(env, pid: int) -> str:
    """The daemon's own count of full (gen-2) GC collections and of objects frozen, from its
    newest stats snapshot (a daemon whose code does not report them: ``?``)."""
    from datahub.cache.stats import read_snapshots, stats_dir

    rows = [
        row
        for snap in sorted(read_snapshots(stats_dir(env.config)), key=lambda s: s.get("time", 0.0))
        if snap.get("pid") == pid
        for row in snap.get("mounts", [])
    ]
    row = rows[-1] if rows else {}
    return f"{row.get('gc_full_collections', '?')} full GC collections so far, {row.get('gc_frozen_objects', '?')} objects frozen"


READERS: dict[str, Callable[[str], int]] = {"open": read_py, "buffered": read_buffered}

#: mount configurations: name -> extra ``datahub mount`` flags
CONFIGS: dict[str, tuple[str, ...]] = {
    # the automatic read mode: passthrough until opens find their page files cached, then
    # zero-message opens with READs in C; io_uring
    "default": (),
    "default-devfuse": ("--no-io-uring",),
    "auto": ("--auto-read-mode",),  # the same as "default", asked for explicitly
    # zero-message opens with READs of disk-tier files answered in C from the start (the
    # default from issue 36 until the automatic mode)
    "zero-msg": ("--no-passthrough",),
    "passthrough": ("--passthrough",),  # the default before issue 36
    "passthrough-devfuse": ("--passthrough", "--no-io-uring"),
    "zero-msg-python": ("--no-fastread",),  # zero-message opens, READs in Python
}


#: flags that fix the read mode (the automatic one needs READs in C, the C loop and page files)
FIXED_READ_MODE = {"--passthrough", "--no-passthrough", "--no-fastread", "--no-fastloop", "--no-cache"}


def automatic(flags: tuple[str, ...]) -> bool:
    """Whether a mount with these flags chooses its read mode automatically (switches once)."""
    return "--auto-read-mode" in flags or not FIXED_READ_MODE & set(flags)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=4000)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--drop", type=int, choices=(1, 3), default=3)
    ap.add_argument("--threads", default="1,8", help="comma-separated reader thread counts")
    ap.add_argument("--kinds", default="ssd-hit,warm", help="comma-separated passes: ssd-hit, warm")
    ap.add_argument(
        "--baseline-python", help="interpreter whose pyfuse3 runs the daemons of NAME@base configs"
    )
    ap.add_argument(
        "--bucket",
        action="store_true",
        help="mount the objects' bucket URL (a bucket mount), not the version",
    )
    known = {**CONFIGS, **{f"{name}@base": flags for name, flags in CONFIGS.items()}}
    add_configs_option(ap, known, default=",".join(CONFIGS))
    args = ap.parse_args()
    configs = chosen_configs(ap, args, known)
    if any(c.endswith("@base") for c in configs) and not args.baseline_python:
        ap.error("an @base config needs --baseline-python")
    thread_counts = [int(t) for t in args.threads.split(",")]
    kinds = [k for k in ("ssd-hit", "warm") if k in args.kinds.split(",")]
    with dataset_bench("warm-path", "wp", args.files, 25, ram_bytes=0) as data:
        total, disk_paths = data.total, data.disk_paths
        header(
            "warm_path",
            f"{args.files} files (50-200 KB, {total / 1e6:.0f} MB), RAM tier off, best of {args.passes}, "
            f"drop_caches {args.drop} before ssd-hit passes{', a bucket mount' if args.bucket else ''}",
        )
        print(
            f"{'config':20} {'pass':7} {'reader':8} {'thr':>3} {'files/s':>8} {'disk f/s':>8} "
            f"{'ratio':>6} {'pairs':>6} {'disk us':>7} {'rd us':>6} {'dm us':>6} {'py us':>5} {'py max':>6} {'disk cs':>7} {'rd cs':>5} {'Cached/B':>8}  requests per file (tracepoint)"
        )

        def measure(
            disk: list[str], paths: list[str], reader: Callable[[str], int], n: int, cold: bool, pid: int
        ) -> Row:
            """``--passes`` rounds, each a local-disk pass then a mount pass (same moment, same
            load): best files/s of each, the ratio of the bests and the median of the rounds'
            own ratios; means per file over the mount passes (reader, daemon, its Python) and
            over the disk passes (reader); Cached growth per byte of the best mount pass."""
            row = Row()
            for _ in range(args.passes):
                rates = []
                for target, daemon in ((disk, None), (paths, pid)):
                    order = target[:]
                    random.shuffle(order)
                    if cold:
                        drop_caches(args.drop)
                    cached0, cpu0, py0, own0 = (
                        cached_bytes(),
                        daemon_cpu(daemon),
                        python_cpu(daemon),
                        own_cpu(),
                    )
                    rates.append(len(order) / read_all(order, n, reader))
                    own1 = own_cpu()
                    if daemon is None:
                        row.disk_us += own1[0] - own0[0]
                        row.disk_cs += own1[1] - own0[1]
                        continue
                    row.dm_us += daemon_cpu(daemon) - cpu0
                    py = python_cpu_since(py0, daemon)
                    row.py_us += py
                    row.py_max = max(row.py_max, py * 1e6 / len(paths))
                    row.rd_us += own1[0] - own0[0]
                    row.rd_cs += own1[1] - own0[1]
                    if rates[1] > row.rate:
                        row.growth = (cached_bytes() - cached0) / total
                row.base = max(row.base, rates[0])
                row.rate = max(row.rate, rates[1])
                row.pairs.append(rates[1] / rates[0])
            row.scale(args.passes * len(paths))
            return row

        def traced(mnt: Path, paths: list[str], reader: Callable[[str], int], n: int, cold: bool) -> str:
            order = paths[:]
            random.shuffle(order)
            if cold:
                drop_caches(args.drop)
            with FuseRequests(mnt) as req:
                read_all(order, n, reader)
            return per_file(req.counts(), len(paths))

        def warm_up(config: str, paths: list[str], pid: int, mnt: Path, n: int) -> None:
            """The epochs that warm the mount before the warm rows, their figures printed.
            In the automatic read mode they repeat until one sends no OPEN and no READ (the switch
            happened, and the epoch after it, which costs one READ per file because
            passthrough cached the page files, not the mount's pages, is over); at most 6."""
            for _ in range(6 if automatic(known[config]) else 1):
                order = paths[:]
                random.shuffle(order)
                cpu0 = daemon_cpu(pid)
                with FuseRequests(mnt) as req:
                    secs = read_all(order, n, read_py)
                cpu = (daemon_cpu(pid) - cpu0) * 1e6 / len(paths)
                counts = req.counts()
                print(
                    f"#   {config}: warming epoch, {n} thr: {len(paths) / secs:,.0f} files/s, daemon {cpu:.1f} "
                    f"us/file, {per_file(counts, len(paths))}",
                    flush=True,
                )
                if not counts.get("FUSE_OPEN") and not counts.get("FUSE_READ"):
                    break
                time.sleep(1.2)  # a tick of the automatic read mode's decision

        for config in configs:
            python = args.baseline_python if config.endswith("@base") else sys.executable
            with (
                daemon_python(python),
                tiered_mount(data, config, known[config], bucket=args.bucket) as (proc, mnt, paths),
            ):
                time.sleep(2.5)  # the next stats snapshot (every 2 s)
                print(
                    f"# {config}: datahub mount {' '.join(known[config]) or '(default flags)'}; {python}; "
                    f"after the cold pass: {gc_counts(data.env, proc.pid)}; {load()}"
                )
                for name in kinds:
                    cold = name == "ssd-hit"
                    if not cold:
                        from bench.mount.warm_anatomy import folios  # (it imports this module)

                        print(f"#   local disk's page cache: {folios(disk_paths[:200])} (200 files)")
                    for rname, reader in READERS.items():
                        for n in thread_counts:
                            if not cold:  # the page cache holds every file, as after an epoch
                                warm_up(config, paths, proc.pid, mnt, n)
                                for p in disk_paths:
                                    read_py(p)
                            r = measure(disk_paths, paths, reader, n, cold, proc.pid)
                            requests = traced(mnt, paths, reader, n, cold)
                            grown = f"{r.growth:8.2f}" if cold else f"{'-':>8}"
                            print(
                                f"{config:20} {name:7} {rname:8} {n:>3} {r.rate:>8,.0f} {r.base:>8,.0f} "
                                f"{r.rate / r.base:>6.2f} {median(r.pairs):>6.2f} {r.disk_us:>7.1f} {r.rd_us:>6.1f} "
                                f"{r.dm_us:>6.1f} {r.py_us:>5.1f} {r.py_max:>6.1f} {r.disk_cs:>7.2f} {r.rd_cs:>5.2f} "
                                f"{grown}  {requests}",
                                flush=True,
                            )
                time.sleep(2.5)  # the next stats snapshot (every 2 s)
                print(f"# {config}: done; {gc_counts(data.env, proc.pid)}; {load()}", flush=True)


if __name__ == "__main__":
    main()
