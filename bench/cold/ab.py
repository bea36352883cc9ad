#!/usr/bin/env python3
"""Two datahub trees, one configuration, many reps in a random order per rep (A/B).

Why: on a 2-core machine the first mount of a pair runs on a colder machine (page cache,
CPU frequency, moto's heap) than the second, so a fixed A-then-B order showed a 15 % gap
that reversed when the order did. A single figure cannot settle a 5 % bound; this runs
``--reps`` pairs through one moto and one latency proxy, shuffles the order of each pair,
and reports the median and every value per tree, and the ratio of medians.

    git worktree add --detach /tmp/base13 937d701
    .venv/bin/python bench/cold/ab.py --a /tmp/base13 --b . --latency 0 --reps 5
    .venv/bin/python bench/cold/ab.py --a . --b . --config dh-noprefetch --config-b dh-plain --workload torch

Same harness as ``run.py`` (fresh mount, empty cache, dropped page cache, cold pass then
warm pass per run); records go to ``$BENCH_WORK/results/ab.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run  # (bench/cold/run.py: Datahub, run_latency, prepare_data, Moto)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", type=Path, required=True, help="datahub tree A (e.g. the baseline worktree)")
    ap.add_argument("--b", type=Path, required=True, help="datahub tree B (e.g. this repository)")
    configs = ["dh-plain", "dh-prefetch", "dh-noprefetch", "dh-version"]
    ap.add_argument("--config", default="dh-plain", choices=configs, help="configuration of A (and of B)")
    ap.add_argument(
        "--config-b",
        choices=configs,
        help="B's configuration, when the pair compares two configurations of one tree "
        "(e.g. --a . --b . --config dh-noprefetch --config-b dh-plain: warm passes after a warm-up)",
    )
    ap.add_argument("--workload", default="epoch", choices=["epoch", "torch"])
    ap.add_argument("--latency", type=float, default=0.0, help="ms")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--limit", type=float, default=90.0)
    ap.add_argument("--seed", type=int, default=None, help="order of the pairs (default: random)")
    ap.add_argument("--out", type=Path, default=run.WORK / "results" / "ab.jsonl")
    args = ap.parse_args()
    config = {"A": args.config, "B": args.config_b or args.config}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    moto = run.Moto(run.PORT, run.WORK / "run")
    results: dict[str, dict[str, list[float]]] = {
        "A": {"cold": [], "warm": []},
        "B": {"cold": [], "warm": []},
    }
    try:
        manifest = run.prepare_data(args.n, 0)
        trees = {"A": run.Datahub(args.a.resolve(), "A"), "B": run.Datahub(args.b.resolve(), "B")}
        for name, dh in trees.items():
            run.log(f"{name} = {dh.commit}: snapshot {dh.snapshot():.1f} s")
        with open(args.out, "a") as out:
            for rep in range(args.reps):
                order = rng.sample(sorted(trees), 2)
                run.log(f"rep {rep + 1}/{args.reps}: order {' then '.join(order)}")
                for name in order:
                    pass_args = SimpleNamespace(
                        label=name,
                        workloads=args.workload,
                        limit=args.limit,
                        manifest=manifest,
                        throttle_burst=None,
                    )
                    start = out.tell()
                    run.run_latency(pass_args, trees[name], args.latency, None, [config[name]], out)
                    out.flush()
                    for line in Path(args.out).read_text()[start:].splitlines():
                        rec = json.loads(line)
                        value = rec["result"].get(run.RATE[args.workload])
                        if rec.get("phase") in ("cold", "warm") and isinstance(value, (int, float)):
                            results[name][rec["phase"]].append(value)
    finally:
        moto.stop()
    print(f"# {args.workload} at L = {args.latency:g} ms, {args.reps} reps, random order per pair")
    for name in ("A", "B"):
        print(f"{name} = {config[name]} on {trees[name].commit}")
    for phase in ("cold", "warm"):
        a, b = results["A"][phase], results["B"][phase]
        if a and b:
            ratio = statistics.median(b) / statistics.median(a)
            print(f"{phase}: A median {statistics.median(a):,.0f} {sorted(round(x) for x in a)}; "
                  f"B median {statistics.median(b):,.0f} {sorted(round(x) for x in b)}; B/A {ratio:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
