"""CPU of one hop from a trio task to a thread and back: trio's against the workspace mount's.

    .venv/bin/python bench/writeback/hop_cost.py [--calls 5000] [--rounds 4]

Issue 41 (smallwrites18). Every small file's FLUSH through a workspace mount hops from the
request loop to a thread (its pack and journal flushes block). This times that hop alone,
with a call that does nothing, in one process, the two ways taking turns each round:

- ``trio``: ``trio.to_thread.run_sync(fn, limiter=CapacityLimiter(16),
  abandon_on_cancel=False)``, what ``fuse_ops.Ops._thread`` does (and every workspace mount
  did before);
- ``hop``: ``fuse_ops.WorkspaceOps._thread`` itself on a ``fuse_adapter.hop.Hop`` of 16 threads.

Printed per round: process CPU (user + system, all threads) per call in µs, and the load.
The machine is shared: compare the two within a round.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from fuse_adapter.fuse_ops import WorkspaceOps
from fuse_adapter.hop import Hop


def nothing() -> int:
    return 1


async def trio_way(calls: int) -> float:
    limiter = trio.CapacityLimiter(16)
    start = time.process_time()
    for _ in range(calls):
        await trio.to_thread.run_sync(nothing, limiter=limiter, abandon_on_cancel=False)
    return (time.process_time() - start) / calls


async def hop_way(calls: int, ops: SimpleNamespace) -> float:
    start = time.process_time()
    for _ in range(calls):
        await WorkspaceOps._thread(ops, nothing)
    return (time.process_time() - start) / calls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    ops = SimpleNamespace(_hop=Hop(16, "hop-cost"))
    trio_us, hop_us = [], []

    async def run() -> None:
        await trio_way(200)  # threads started, code warm
        await hop_way(200, ops)
        for r in range(args.rounds):
            order = [("trio", trio_way(args.calls)), ("hop", hop_way(args.calls, ops))]
            if r % 2:
                order.reverse()
            got = {}
            for name, coro in order:
                got[name] = await coro * 1e6
            trio_us.append(got["trio"])
            hop_us.append(got["hop"])
            uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
            print(
                f"round {r + 1}: trio {got['trio']:.1f} us, hop {got['hop']:.1f} us CPU per call ({uptime})"
            )

    trio.run(run)
    print(
        f"median: trio {statistics.median(trio_us):.1f} us, hop {statistics.median(hop_us):.1f} us CPU per call"
    )


if __name__ == "__main__":
    main()
