"""A/B of two source trees of datahub on workspace mounts, taking turns in one run.

    .venv/bin/python bench/writeback/tree_ab.py BASE_TREE [--rounds 4] [--files 16]
        [--size 16777216] [--passthrough | --no-passthrough] [--threads 1,4]

Issue 41. ``BASE_TREE`` is another checkout of the repository (e.g. ``git archive BASE |
tar -x -C /tmp/base``); this tree is "head". Each round mounts a workspace (as
``mount_writes.py``: local shared tier, flush interval an hour) from each tree in turn (the
daemon runs with the tree as its working directory, so ``python -m fuse_adapter`` imports
that tree's code; the venv's pyfuse3 is the same for both), alternating which goes first,
and writes ``--files`` files of ``--size`` bytes in 1 MiB calls, closing each, with each
``--threads`` count; the same files written to a local directory on the same disk with
``fsync`` before ``close`` are the baseline of each round. Printed per round and as
medians: MiB/s and the ratio to the round's local baseline, and the daemon's CPU per MiB
(utime + stime of the mount process), with ``uptime`` before and after each round.
The machine is shared: CPU per MiB is the figure to compare; wall clock swings with load.
Use an even number of rounds: the mount measured second in a round pays up to 2-3x the CPU
per MiB of the first for 16 MiB files, whichever tree it runs (probably the writeback of the
first mount's bytes, charged to the second's fsyncs; docs/benchmarks.md, "writes9").
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mount_writes import REPO, Mount, cpu_seconds, load, write_files

MiB = 1024**2


def which_datahub(tree: Path) -> str:
    """Where the daemon started in ``tree`` imports datahub from (checked, not assumed)."""
    code = "import datahub, os; print(os.path.dirname(datahub.__file__))"
    return subprocess.run(
        [sys.executable, "-c", code], cwd=tree, capture_output=True, text=True
    ).stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("base_tree", help="another checkout of the repository (the base)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--files", type=int, default=16)
    ap.add_argument("--size", type=int, default=16 * MiB)
    ap.add_argument("--threads", default="1,4")
    ap.add_argument("--passthrough", action=argparse.BooleanOptionalAction, default=True)
    args = ap.parse_args()
    trees = {"base": Path(args.base_tree).resolve(), "head": REPO}
    for name, tree in trees.items():
        print(f"{name}: datahub from {which_datahub(tree)}")
    threads = [int(t) for t in args.threads.split(",")]
    data = os.urandom(args.size)
    total = args.files * args.size / MiB
    flag = "--passthrough" if args.passthrough else "--no-passthrough"
    root = Path(tempfile.mkdtemp(prefix="wb-tree-ab-", dir="/var/tmp"))
    keys = [f"{n}{t}" for t in threads for n in ("local", "base", "head")]
    speed: dict[str, list[float]] = {k: [] for k in keys}
    cpu: dict[str, list[float]] = {k: [] for k in keys}
    try:
        for r in range(args.rounds):
            print(f"round {r + 1}: load before: {load()}", flush=True)
            order = ["base", "head"] if r % 2 == 0 else ["head", "base"]
            mounts = {n: Mount(root, f"{n}{r}", [flag], repo=trees[n]) for n in order}
            try:
                for m in mounts.values():
                    write_files(m.mnt / "warm", 2, data[: 4 * MiB], 1, False)  # threads, ids
                for t in threads:
                    secs = write_files(root / f"local{t}-{r}", args.files, data, t, True)
                    speed[f"local{t}"].append(total / secs)
                    shutil.rmtree(root / f"local{t}-{r}")
                    for n in order:
                        m = mounts[n]
                        before = cpu_seconds(m.pid)
                        secs = write_files(m.mnt / f"w{t}", args.files, data, t, False)
                        cpu[f"{n}{t}"].append((cpu_seconds(m.pid) - before) / total * 1e3)
                        speed[f"{n}{t}"].append(total / secs)
                    print(
                        f"  {t} writer(s): local {speed[f'local{t}'][-1]:.0f} MiB/s; "
                        + "; ".join(
                            f"{n} {speed[f'{n}{t}'][-1]:.0f} MiB/s "
                            f"({speed[f'{n}{t}'][-1] / speed[f'local{t}'][-1]:.2f}), "
                            f"daemon {cpu[f'{n}{t}'][-1]:.2f} ms CPU/MiB"
                            for n in order
                        ),
                        flush=True,
                    )
            finally:
                for m in mounts.values():
                    m.umount()
            print(f"round {r + 1}: load after: {load()}", flush=True)
        print(f"{args.files} x {args.size:,} B, {flag}; medians of {args.rounds} rounds (base -> head):")
        for t in threads:
            local = statistics.median(speed[f"local{t}"])
            ratios = {
                n: statistics.median(s / b for s, b in zip(speed[f"{n}{t}"], speed[f"local{t}"], strict=True))
                for n in ("base", "head")
            }
            b, h = (statistics.median(cpu[f"{n}{t}"]) for n in ("base", "head"))
            print(
                f"  {t} writer(s): local {local:.0f} MiB/s; ratio {ratios['base']:.2f} -> {ratios['head']:.2f}; "
                f"daemon CPU {b:.2f} -> {h:.2f} ms/MiB ({h / b:.2f}x)"
            )
            if args.size < MiB:  # small files: per file, and each round's pair (taken back to back)
                per = args.size / MiB
                walls = {n: [per / v * 1e3 for v in speed[f"{n}{t}"]] for n in ("local", "base", "head")}
                pairs = ", ".join(
                    f"{x:.2f}/{y:.2f}" for x, y in zip(walls["base"], walls["head"], strict=True)
                )
                print(
                    f"    per file: wall local {statistics.median(walls['local']):.2f}, base "
                    f"{statistics.median(walls['base']):.2f} -> head {statistics.median(walls['head']):.2f} ms "
                    f"(rounds, base/head: {pairs}); daemon CPU {b * per:.2f} -> {h * per:.2f} ms"
                )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
