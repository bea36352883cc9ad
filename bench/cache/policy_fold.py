"""The eviction policy's share of the once-a-second fold of hits answered in C (issue 36: the
daemon's Python per SSD-tier hit): ``on_hit`` of each key, as ``DiskTier.touch`` called it,
against one ``on_hits`` call for the batch, in the same run.

    .venv/bin/python bench/cache/policy_fold.py [--keys 2000] [--rounds 9]

Each policy holds ``--keys`` page keys of 50-200 KB objects (a mount's ``PageKey``: URL,
etag, page size, index 0), all hit once before timing (so hits move keys within the
protected segment, as an epoch's do); then ``--rounds`` rounds, each timing one batch of
every key in a shuffled order both ways, alternately (which goes first alternates too).
Printed per policy: the median CPU µs per hit of each way (``time.process_time``), their
ratio, and ``uptime`` load (the machine may be shared).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from datahub.cache.pages import PageKey
from datahub.cache.policy import make_policy


def per_key(policy, keys) -> None:
    """The fold before: one ``on_hit`` call per key."""
    on_hit = policy.on_hit
    for key in keys:
        on_hit(key)


def batch(policy, keys) -> None:
    """The fold now: one ``on_hits`` call for the batch."""
    policy.on_hits(keys)


def timed(fn, policy, keys) -> float:
    t = time.process_time()
    fn(policy, keys)
    return (time.process_time() - t) / len(keys) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    rng = random.Random(5)
    keys = [
        PageKey(
            f"s3://bucket/data/train/c{i % 20:02d}/img_{i:06d}.jpg",
            f'"{rng.getrandbits(128):032x}"',
            1 << 20,
            0,
        )
        for i in range(args.keys)
    ]
    print(
        f"# policy_fold: {args.keys} keys, {args.rounds} rounds; load {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print(f"{'policy':8} {'on_hit each µs':>15} {'on_hits µs':>11} {'ratio':>6}")
    for name in ("tinylfu", "slru", "lru"):
        policy = make_policy(name, 4 * 1024**3)
        for key in keys:
            policy.on_insert(key, rng.randint(50_000, 200_000))
        policy.on_hits(keys)
        old, new = [], []
        for r in range(args.rounds):
            order = rng.sample(keys, len(keys))
            pair = ((per_key, old), (batch, new)) if r % 2 == 0 else ((batch, new), (per_key, old))
            for fn, out in pair:
                out.append(timed(fn, policy, order))
        a, b = statistics.median(old), statistics.median(new)
        print(f"{name:8} {a:15.3f} {b:11.3f} {b / a:6.2f}")
    print(f"# load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
