"""Two (or more) epochs over a dataset 1.5x the RAM budget: the last epoch's RAM hit ratio per
eviction policy, against the bound cache/dataset (a cache can at best keep that share).
Goal: the scan-resistant policy (tinylfu) reaches >= 0.8 of the bound; LRU gets ~0.

The loop reads every object of a memory:// dataset through a RAM-only TieredCache, in the
same order each epoch (a sequential sampler) and, separately, in a fresh random order each
epoch (a shuffling sampler; the bound is the same).

Usage: .venv/bin/python bench/cache/epochs.py [--objects 3000] [--size 65536] [--epochs 2]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
import uuid
from pathlib import Path

from common import config_in, header

from datahub.cache import POLICIES, open_cache
from datahub.storage import StoreRegistry, drop_memory_space


def run(
    policy: str, objects: int, size: int, epochs: int, shuffle: bool, seed: int = 7
) -> tuple[float, float]:
    ram = int(objects / 1.5) * size
    space = f"epochs-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as home:
        config = config_in(
            Path(home), page_size=size, ram_bytes=ram, disk_bytes=0, policy=policy, readahead_bytes=0
        )
        with StoreRegistry(config) as stores, open_cache(config, stores) as cache:
            store = stores.store(f"memory://{space}")
            blob = bytes(size)
            refs = []
            for i in range(objects):
                store.put(f"{i:06d}", blob)
                refs.append(store.ref(f"{i:06d}"))
            rng = random.Random(seed)
            [tier] = cache.tiers
            t0 = time.perf_counter()
            for _ in range(epochs):
                order = rng.sample(refs, len(refs)) if shuffle else refs
                hits_before = tier.counters.hits
                for ref in order:
                    cache.read(ref)
                    cache.maintain() if tier.usage().used > tier.high * tier.budget else None
            elapsed = time.perf_counter() - t0
            last_ratio = (tier.counters.hits - hits_before) / objects
    drop_memory_space(space)
    return last_ratio, elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--objects", type=int, default=3000)
    ap.add_argument("--size", type=int, default=64 * 1024)
    ap.add_argument("--epochs", type=int, default=2)
    args = ap.parse_args()
    bound = int(args.objects / 1.5) / args.objects
    header(
        f"{args.epochs} epochs over {args.objects} objects of {args.size} B, RAM = dataset / 1.5 (bound {bound:.3f})"
    )
    print(f"{'policy':<10} {'order':<10} {'last-epoch hit ratio':>22} {'of bound':>9} {'seconds':>8}")
    for shuffle in (False, True):
        for policy in POLICIES:
            ratio, elapsed = run(policy, args.objects, args.size, args.epochs, shuffle)
            order = "shuffled" if shuffle else "sequential"
            print(f"{policy:<10} {order:<10} {ratio:>22.3f} {ratio / bound:>9.2f} {elapsed:>8.1f}")


if __name__ == "__main__":
    main()
