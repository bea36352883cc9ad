"""CPU per change of the catalog's checks (``catalog.validated_changes``) over a 1 % change
set (puts mixed with deletes): this checkout against an older commit, alternated, same run.

    .venv/bin/python bench/scale/checks_ab.py [--base 60892c6] [--changes 100000] [--rounds 3]

Each side, in a fresh process (the base's ``datahub`` exported with ``git archive`` and put
first on ``PYTHONPATH``), builds ``scale.small_changes`` of ``100 × --changes`` records
(60 % modified puts, 20 % deletes, 20 % added puts, as the 1 % commit of ``scale.py``) into
a list first, then times consuming ``validated_changes`` over it: the checks alone, with
no generator and no store (the part of the 1 % commit's CPU that does not wait on I/O).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import os, sys, time
sys.path.append(sys.argv[2])
from datahub.catalog.catalog import validated_changes
from bench.scale.scale import small_changes
n = int(sys.argv[1])
changes = list(small_changes(100 * n, 0.01))
c = time.process_time()
for _ in validated_changes("d", changes):
    pass
cpu = time.process_time() - c
print(f"{len(changes):,} changes checked in {cpu:.3f} CPU-s = {cpu / len(changes) * 1e6:.2f} µs per change; "
      f"load {os.getloadavg()[0]:.1f}", flush=True)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--base", default="60892c6", help="the older commit (puts of mixed chunks checked alone)"
    )
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(
            ["git", "archive", args.base, "datahub"], cwd=ROOT, check=True, capture_output=True
        )
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        sides = {f"base {args.base}": tmp, f"head {head.stdout.strip()}": str(ROOT)}
        for _ in range(args.rounds):
            for label, path in sides.items():
                out = subprocess.run(
                    [sys.executable, "-c", CHILD, str(args.changes), str(ROOT)],
                    env={**os.environ, "PYTHONPATH": path}, check=True, capture_output=True, text=True,
                )  # fmt: skip
                print(f"{label:>14}: {out.stdout.strip()}", flush=True)


if __name__ == "__main__":
    main()
