"""Epochs looping over a dataset twice the size of the RAM tier (issue 25 item 9).

    .venv/bin/python bench/mount/ram_loop.py [--files 2150] [--ram-mib 128] [--epochs 3]
                                             [--drop 1|0] [--policy NAME] [--configs ...]

Why: a training job reads the same version epoch after epoch, each in a new shuffled
order. When the version is larger than the RAM tier, an LRU over that loop evicts every
page before it is asked for again (each epoch all misses), and reads through the daemon
pay for a RAM tier that never hits; with FUSE passthrough the kernel reads disk-tier
files itself and the RAM tier is not asked at all. This shows which happens.

Uploads ``--files`` objects of 50-200 KB (the default: about 256 MiB, twice the RAM tier)
to a moto server on loopback and mounts the version with the real ``datahub mount ...
--foreground`` daemon, RAM tier ``--ram-mib``, disk tier big enough for all. For each
configuration (a local-disk copy; the mount with default flags, i.e. zero-message opens
with READs of disk-tier files answered in C; the mount with ``--passthrough``) one cold
pass fills the tiers, then ``--epochs`` epochs
in a shuffled order each, with 1 and 8 reader threads (Python ``open().read()``). Before
each epoch ``--drop 1`` drops the page cache (a node whose page cache cannot hold the
dataset; ``--drop 0`` keeps it). Printed per epoch: files/s, the ratio to local disk (same
threads, same epoch), the daemon's CPU per file, the RAM and disk tiers' hits and misses
and RAM evictions over the epoch (the counters ``datahub cache stats`` shows, from the
daemon's stats snapshot), and the growth of ``Cached`` per byte of data read.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
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
    read_all,
    tier_counters,
    tiered_mount,
)

#: mount configurations: name -> extra ``datahub mount`` flags
CONFIGS = {"default": (), "passthrough": ("--passthrough",)}
COUNTERS = (("ram", "hits"), ("ram", "misses"), ("ram", "evictions"), ("disk", "hits"), ("disk", "misses"))


def delta(after: dict[str, dict], before: dict[str, dict]) -> list[int]:
    return [after.get(t, {}).get(c, 0) - before.get(t, {}).get(c, 0) for t, c in COUNTERS]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=2150, help="objects of 50-200 KB (2150: about 256 MiB)")
    ap.add_argument("--ram-mib", type=int, default=128, help="RAM tier budget")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--threads", default="1,8", help="comma-separated reader thread counts")
    ap.add_argument(
        "--drop", type=int, choices=(0, 1), default=1, help="drop the page cache before each epoch"
    )
    ap.add_argument("--policy", default="", help="cache.policy for the mounts (default: the config's)")
    add_configs_option(ap, CONFIGS)
    args = ap.parse_args()
    configs = chosen_configs(ap, args, CONFIGS)
    threads = [int(t) for t in args.threads.split(",") if t]
    ram = args.ram_mib * 1024**2
    with dataset_bench("ram-loop", "loop", args.files, 9, ram_bytes=ram) as data:
        env, total, disk_paths = data.env, data.total, data.disk_paths
        if args.policy:
            env.config_path.write_text(env.config_path.read_text() + f'policy = "{args.policy}"\n')
        from datahub.config import load_config

        policy = load_config(env.config_path, env={}).cache.policy
        header(
            "ram_loop",
            f"{args.files} files (50-200 KB, {total / 2**20:.0f} MiB = {total / ram:.2f}x the RAM tier of "
            f"{args.ram_mib} MiB), policy {policy}, {args.epochs} shuffled epochs, drop_caches "
            f"{args.drop or 'no'} before each",
        )
        print(
            f"{'config':15} {'thr':>3} {'epoch':>5} {'files/s':>8} {'vs disk':>7} {'us/file':>8} "
            f"{'ram hit':>7} {'ram miss':>8} {'ram evict':>9} {'disk hit':>8} {'disk miss':>9} {'Cached/B':>8}"
        )
        rates: dict[tuple[int, int], float] = {}

        def epochs(config: str, paths: list[str], env_pid: int | None) -> None:
            for n in threads:
                before = tier_counters(env, env_pid, time.time()) if env_pid else {}
                for epoch in range(1, args.epochs + 1):
                    order = paths[:]
                    random.shuffle(order)
                    if args.drop:
                        drop_caches(1)
                    cached0, cpu0 = cached_bytes(), daemon_cpu(env_pid)
                    dt = read_all(order, n)
                    cpu, cached = daemon_cpu(env_pid) - cpu0, cached_bytes() - cached0
                    rate = len(paths) / dt
                    if env_pid is None:
                        rates[(n, epoch)] = rate
                        counts = ["-"] * len(COUNTERS)
                    else:
                        # hits answered in C are folded in once a second: ask for a later snapshot
                        after = tier_counters(env, env_pid, time.time() + 1.1)
                        counts = [f"{c:,}" for c in delta(after, before)]
                        before = after
                    base = rates.get((n, epoch))
                    print(
                        f"{config:15} {n:>3} {epoch:>5} {rate:>8,.0f} {rate / base:>7.2f} "
                        f"{cpu / len(paths) * 1e6:>8.1f} {counts[0]:>7} {counts[1]:>8} {counts[2]:>9} "
                        f"{counts[3]:>8} {counts[4]:>9} {cached / total:>8.2f}",
                        flush=True,
                    )

        epochs("local disk", disk_paths, None)
        for config in configs:
            # the cold pass: the first mount fills the disk tier; each, the RAM tier as far as it goes
            with tiered_mount(data, config, CONFIGS[config]) as (proc, _, paths):
                epochs(config, paths, proc.pid)


if __name__ == "__main__":
    main()
