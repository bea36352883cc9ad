"""What the shared log (nodeloss20) costs per acknowledging change, with and without it in one run.

    .venv/bin/python bench/writeback/shared_log_cost.py [--files 200] [--size 102400] [--rounds 4]

Opens a workspace on a local shared tier (packs, the default) through the ``Workspace`` API
and, per round, for each variant in turn (alternating which goes first): writes ``--files``
new files of ``--size`` bytes (each closed: covered first commits, no log record waited for),
overwrites each once (open, rewrite, close: an LMDB transaction whose record must land first),
and renames each once. Variant ``log`` is the code as it is; ``nolog`` is the same workspace
with the journal's shipper taken away (what the journal did before nodeloss20). Printed per
round and as medians: wall per operation and the process's CPU (user + system, every thread)
per operation, with the load average. The machine is shared: compare CPU per operation first.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from datahub.config import load_config
from datahub.storage import StoreRegistry
from datahub.writeback import open_workspace


def cpu() -> float:
    t = os.times()
    return t.user + t.system


def timed(fn, n: int) -> tuple[float, float]:
    """(wall ms, CPU ms) per operation of ``fn`` run ``n`` times."""
    w0, c0 = time.perf_counter(), cpu()
    for i in range(n):
        fn(i)
    return (time.perf_counter() - w0) * 1000 / n, (cpu() - c0) * 1000 / n


def run(ws, prefix: str, files: int, data: bytes) -> dict[str, tuple[float, float]]:
    def create(i: int) -> None:
        with ws.open(f"{prefix}/f{i}", create=True) as fh:
            fh.write(0, data)

    def overwrite(i: int) -> None:
        with ws.open(f"{prefix}/f{i}", truncate=True) as fh:
            fh.write(0, data[::-1])

    def rename(i: int) -> None:
        ws.rename(f"{prefix}/f{i}", f"{prefix}/g{i}")

    ws.mkdir(prefix)
    return {"new": timed(create, files), "overwrite": timed(overwrite, files), "rename": timed(rename, files)}


def checkpoint(ws, files: int, size: int) -> None:
    """Time the checkpoint an open writes, at ``files`` files (created here, deferred commits)."""
    ws.mkdir("many")
    for i in range(files):
        with ws.open(f"many/{i}", create=True) as fh:
            fh.write(0, b"x" * min(size, 1000))
    ws.journal.settle_deferred()
    rows = sum(1 for _ in ws.listdir("many")) + 1
    for _ in range(3):
        w0, c0 = time.perf_counter(), cpu()
        ws.journal.shipper.resync()
        print(
            f"checkpoint of {rows} namespace entries (+ as many file records): "
            f"{time.perf_counter() - w0:.3f} s wall, {cpu() - c0:.3f} s CPU, load {os.getloadavg()}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--size", type=int, default=102400)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument(
        "--checkpoint", type=int, default=0, metavar="N",
        help="also time the open's checkpoint (``SharedLog.resync``) of a workspace of N small files",
    )  # fmt: skip
    args = parser.parse_args()
    data = os.urandom(args.size)
    results: dict[str, dict[str, list[tuple[float, float]]]] = {"log": {}, "nolog": {}}
    with tempfile.TemporaryDirectory(prefix="shared-log-cost-") as tmp:
        config = load_config(
            env={},
            overrides={"home": f"{tmp}/home", "objects_url": Path(f"{tmp}/objects").as_uri(),
                       "cache": {"flush_interval": 3600, "shared_url": Path(f"{tmp}/shared").as_uri()}},
        )  # fmt: skip
        stores = StoreRegistry(config)
        ws = open_workspace("bench", config, stores)
        shipper, fence = ws.journal.shipper, ws.journal.fence
        try:
            for r in range(args.rounds):
                order = ["log", "nolog"] if r % 2 == 0 else ["nolog", "log"]
                print(f"round {r + 1}: load {os.getloadavg()}")
                for variant in order:
                    ws.journal.shipper = shipper if variant == "log" else None
                    ws.journal.fence = fence if variant == "log" else (lambda doing: None)  # no lease here
                    out = run(ws, f"r{r}-{variant}", args.files, data)
                    ws.journal.settle_deferred()
                    for op, (wall, c) in out.items():
                        results[variant].setdefault(op, []).append((wall, c))
                        print(f"  {variant:5} {op:9}: {wall:6.3f} ms wall, {c:6.3f} ms CPU per op")
            ws.journal.shipper, ws.journal.fence = shipper, fence
            if args.checkpoint:
                checkpoint(ws, args.checkpoint, args.size)
        finally:
            ws.abandon()
            stores.close()
    print(
        f"medians over {args.rounds} rounds ({args.files} files of {args.size} bytes), load {os.getloadavg()}:"
    )
    for op in ("new", "overwrite", "rename"):
        row = []
        for variant in ("nolog", "log"):
            walls = [w for w, _ in results[variant][op]]
            cpus = [c for _, c in results[variant][op]]
            row.append(
                f"{variant} {statistics.median(walls):.3f} ms wall / {statistics.median(cpus):.3f} ms CPU"
            )
        print(f"  {op:9}: " + "  vs  ".join(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
