"""Warm epochs and SSD-tier hits through one mount, every read mode side by side (issue 36).

    .venv/bin/python bench/mount/warm_path.py [--files 4000] [--passes 3] [--drop 1|3]
                                              [--configs default,passthrough,...] [--bucket]

Uploads ``--files`` objects of 50-200 KB to a moto server on loopback and mounts the
version (``--bucket``: their bucket URL, a bucket mount) with the real ``datahub mount ...
--foreground`` daemon, **RAM tier off**, so every
read the kernel sends is a disk-tier hit. The first mount's cold pass fills the disk tier;
then, for each configuration in turn (``CONFIGS``: the mount's read modes and transports),
with a **local-disk pass measured right before it** (the ratio's baseline, so both see the
same machine load):

- *ssd-hit*: ``drop_caches`` (``--drop``: 3 also drops dentries, so each file also costs a
  LOOKUP, answered in C once known), then every file read whole in a shuffled order;
- *warm*: the same without dropping anything (the page cache holds every file);

each with Python's default ``open(p, "rb")`` (3.11: an ``isatty()`` ioctl per file) and a
buffered open (``open(p, "rb", buffering=1 << 20)``: no ioctl; datahub.torch's readers), 1
and 8 threads (``--kinds`` and ``--threads`` pick a subset). Printed per row: files/s, the
ratio to the local-disk pass just before, the readers' CPU per file on local disk and on
the mount (this process, getrusage: work passthrough leaves in the reader, the page
file's disk read and copy, shows here), the daemon's CPU per file (utime+stime,
/proc/PID/stat; reader + daemon is what a file costs the machine) and of it the Python
threads' ("py us", the rest is the C threads'), the readers' context
switches per file on local disk and on the mount (each request a reader waits for is one),
all means over the timed passes, for
ssd-hit the growth of ``Cached`` per byte read (1.0: each byte cached once), and the FUSE
requests per file by opcode from the kernel's tracepoint (one more, untimed pass). Files/s
is the best of ``--passes``. ``uptime`` load is printed with every configuration: the
machine may be shared.

To compare two checkouts (say, a change to fastread.h, or to the daemon's Python) in one
run, alternately:
``--baseline-python OTHER/.venv/bin/python --configs default@base,default,default@base,default``
(a name ending in ``@base`` runs the daemon of that configuration with the other
interpreter, so with its pyfuse3 and, as it is started with ``PYTHONSAFEPATH=1`` (this
tree, its working directory, not first on its path), with the Python code that interpreter
has installed: OTHER's own when OTHER's .venv installed it in editable mode).
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
from pathlib import Path

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
            f"{'ratio':>6} {'disk us':>7} {'rd us':>6} {'dm us':>6} {'py us':>5} {'disk cs':>7} {'rd cs':>5} {'Cached/B':>8}  requests per file (tracepoint)"
        )

        def measure(
            paths: list[str], reader: Callable[[str], int], n: int, cold: bool, pid: int | None
        ) -> tuple[float, float, float, float, float, float]:
            """(best files/s, mean reader, daemon and daemon's Python us/file, reader context
            switches per file, Cached growth per byte of the best pass)."""
            best, cpu_total, py_total, own_total, switches, growth = 0.0, 0.0, 0.0, 0.0, 0, 0.0
            for _ in range(args.passes):
                order = paths[:]
                random.shuffle(order)
                if cold:
                    drop_caches(args.drop)
                cached0, cpu0, py0, own0 = cached_bytes(), daemon_cpu(pid), python_cpu(pid), own_cpu()
                rate = len(order) / read_all(order, n, reader)
                cpu_total += daemon_cpu(pid) - cpu0
                py_total += python_cpu_since(py0, pid)
                own1 = own_cpu()
                own_total += own1[0] - own0[0]
                switches += own1[1] - own0[1]
                if rate > best:
                    best, growth = rate, (cached_bytes() - cached0) / total
            scale = 1e6 / args.passes / len(paths)  # seconds in all passes -> us per file
            per_pass = switches / args.passes / len(paths)
            return best, own_total * scale, cpu_total * scale, py_total * scale, per_pass, growth

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
                print(
                    f"# {config}: datahub mount {' '.join(known[config]) or '(default flags)'}; {python}; {load()}"
                )
                for name in kinds:
                    cold = name == "ssd-hit"
                    for rname, reader in READERS.items():
                        for n in thread_counts:
                            if not cold:  # the page cache holds every file, as after an epoch
                                warm_up(config, paths, proc.pid, mnt, n)
                                for p in disk_paths:
                                    read_py(p)
                            base, base_us, _, _, base_cs, _ = measure(disk_paths, reader, n, cold, None)
                            rate, own_us, cpu_us, py_us, cs, growth = measure(
                                paths, reader, n, cold, proc.pid
                            )
                            requests = traced(mnt, paths, reader, n, cold)
                            grown = f"{growth:8.2f}" if cold else f"{'-':>8}"
                            print(
                                f"{config:20} {name:7} {rname:8} {n:>3} {rate:>8,.0f} {base:>8,.0f} "
                                f"{rate / base:>6.2f} {base_us:>7.1f} {own_us:>6.1f} {cpu_us:>6.1f} {py_us:>5.1f} {base_cs:>7.2f} {cs:>5.2f} "
                                f"{grown}  {requests}",
                                flush=True,
                            )
                print(f"# {config}: done; {load()}", flush=True)


if __name__ == "__main__":
    main()
