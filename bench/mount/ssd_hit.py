"""SSD-tier hits over a mount, FUSE passthrough and its C fast paths vs the default read mode vs local disk.

    .venv/bin/python bench/mount/ssd_hit.py [--files 4000] [--passes 2] [--drop 1|3] [--configs ...]
                                            [--reader py|torch]

Uploads ``--files`` objects of 50-200 KB to a moto server on loopback and mounts the
version with the real ``datahub mount ... --foreground`` daemon, **RAM tier off**
(``cache.ram_bytes = 0``), so every hit is a disk-tier hit. One cold pass fills the disk
tier; then, in the same run, for each configuration (the mount with ``--passthrough``,
whose opens, releases and ``isatty()`` ioctls of published files pyfuse3's C reader thread
answers; the same with ``--no-fastloop``, answered in C on the trio loop's thread; the same
with ``--no-fastopen`` too, which answers them in Python; ``pt-no-io-uring`` (/dev/fuse);
``pt-no-lookup-in-c`` (every LOOKUP in Python: with ``--drop 3`` the baseline of LOOKUPs
answered in C); the mount with default flags (zero-message opens, READs answered in C from
the page files; bench/mount/warm_path.py compares the read modes in detail) over the same
disk tier; and a local-disk copy):

- *SSD hit*: ``echo N > /proc/sys/vm/drop_caches`` (``--drop``: 1 drops the page cache
  only, as when a dataset is larger than RAM and its dentries stay; 3 also drops dentries
  and inodes, so every open also sends LOOKUP), then every file read whole in a shuffled
  order;
- *warm*: the same pass again without dropping the page cache.

Readers (``--reader``): ``py``, Python ``open(path, "rb").read()`` with 1 and 8 threads;
``torch``, a ``torch.utils.data`` Dataset over the paths (bytes -> ``torch.frombuffer``)
read by a DataLoader with 2 worker processes, batches of 32, shuffled (the "threads"
column then says ``2w``); after each drop, one DataLoader pass over a tiny file brings
torch's own code back into the page cache, so ``Cached`` counts the data only.

Printed per row: files/s, the ratio to local disk, the daemon's CPU per file (utime+stime
of the mount process, /proc/PID/stat) and, for SSD-hit passes, the growth of ``Cached`` in
/proc/meminfo per byte of data read (1.0: each byte cached once). Figures are the best of
``--passes`` passes. The machine may be shared: throughput moves with other load; CPU per
file is the stable figure.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.mount.common import (
    REPO,
    add_configs_option,
    cached_bytes,
    chosen_configs,
    daemon_cpu,
    dataset_bench,
    drop_caches,
    header,
    local_copy,
    read_all,
    read_py,
    tiered_mount,
)

#: mount configurations: name -> extra ``datahub mount`` flags
CONFIGS = {
    "passthrough": ("--passthrough",),
    "pt-no-io-uring": ("--passthrough", "--no-io-uring"),
    "pt-no-lookup-in-c": ("--passthrough", "--no-lookup-in-c"),
    "pt-no-fastloop": ("--passthrough", "--no-fastloop"),
    "pt-no-fastopen": ("--passthrough", "--no-fastloop", "--no-fastopen"),
    "default": (),
}


def torch_pass(paths: list[str], workers: int) -> float:
    """Seconds of one DataLoader epoch over ``paths`` (its own shuffle), as a training job reads."""
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Files(Dataset):
        def __len__(self) -> int:
            return len(paths)

        def __getitem__(self, i: int) -> torch.Tensor:
            with open(paths[i], "rb") as f:
                return torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)

    loader = DataLoader(Files(), batch_size=32, shuffle=True, num_workers=workers, collate_fn=list)
    t0 = time.perf_counter()
    for _ in loader:
        pass
    return time.perf_counter() - t0


def py_pass(paths: list[str], threads: int) -> float:
    order = paths[:]
    random.shuffle(order)
    return read_all(order, threads)


#: reader -> (its pass function, the thread or worker counts measured, their column label)
READERS: dict[str, tuple[Callable[[list[str], int], float], tuple[int, ...], str]] = {
    "py": (py_pass, (1, 8), "{}"),
    "torch": (torch_pass, (2,), "{}w"),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=4000)
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument(
        "--drop", type=int, choices=(1, 3), default=3, help="drop_caches level before SSD-hit passes"
    )
    ap.add_argument("--reader", choices=tuple(READERS), default="py")
    add_configs_option(ap, CONFIGS)
    args = ap.parse_args()
    configs = chosen_configs(ap, args, CONFIGS)
    one_pass, counts, label = READERS[args.reader]
    with dataset_bench("ssd-hit", "ssd", args.files, 25, ram_bytes=0) as data:
        env, total, disk_paths = data.env, data.total, data.disk_paths
        prime = local_copy(data.tmp / "prime", {"tiny": b"x"}) * 64
        header(
            "ssd_hit",
            f"{args.files} files (50-200 KB, {total / 1e6:.0f} MB), RAM tier off, reader {args.reader}, "
            f"best of {args.passes}, drop_caches {args.drop}",
        )
        print(
            f"{'config':16} {'pass':8} {'threads':>7} {'files/s':>9} {'vs disk':>8} "
            f"{'daemon us/file':>15} {'Cached/byte':>12}"
        )
        rows: dict[tuple[str, str, int], float] = {}

        def measure(paths: list[str], n: int, pid: int | None, cold: bool) -> tuple[float, float, int]:
            best = None
            for _ in range(args.passes):
                if cold:
                    drop_caches(args.drop)
                    if args.reader == "torch":  # torch's code back in the page cache, not counted
                        one_pass(prime, n)
                cached0, cpu0 = cached_bytes(), daemon_cpu(pid)
                dt = one_pass(paths, n)
                got = (dt, daemon_cpu(pid) - cpu0, cached_bytes() - cached0)
                if best is None or got[0] < best[0]:
                    best = got
            dt, cpu, cached = best
            return len(paths) / dt, cpu / len(paths) * 1e6, cached

        def report(config: str, paths: list[str], pid: int | None) -> None:
            for cold, name in ((True, "ssd-hit"), (False, "warm")):
                for n in counts:
                    if not cold:
                        for p in paths:  # the page cache holds the files (as after an epoch)
                            read_py(p)
                    rate, cpu_us, cached = measure(paths, n, pid, cold)
                    rows[(config, name, n)] = rate
                    base = rows.get(("local disk", name, n))
                    ratio = f"{rate / base:8.2f}" if base else f"{'-':>8}"
                    growth = f"{cached / total:12.2f}" if cold else f"{'-':>12}"
                    print(
                        f"{config:16} {name:8} {label.format(n):>7} {rate:>9,.0f} {ratio} "
                        f"{cpu_us:>15.1f} {growth}",
                        flush=True,
                    )

        report("local disk", disk_paths, None)
        for config in configs:
            with tiered_mount(data, config, CONFIGS[config]) as (proc, _, paths):
                report(config, paths, proc.pid)
                out = subprocess.run(
                    [sys.executable, "-m", "datahub.cli.main", "--config", str(env.config_path)]
                    + ["cache", "stats"],
                    capture_output=True,
                    text=True,
                    cwd=REPO,
                ).stdout
                print("# " + "\n# ".join(line for line in out.splitlines() if line.startswith("opens of")))


if __name__ == "__main__":
    main()
