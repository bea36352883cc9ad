"""How many ``datahub`` processes a test run starts, and what they cost in CPU.

    .venv/bin/python bench/startup/suite_account.py [--tree DIR] [--log FILE] -- TESTS...
    .venv/bin/python bench/startup/suite_account.py --summarise FILE

Runs ``pytest -q TESTS`` from ``DIR`` (default: this checkout; a ``git archive`` of another
commit for a before/after) with ``bench/startup/account`` on PYTHONPATH, whose
``sitecustomize`` makes every Python process append its command line, CPU and wall seconds
to one log; then prints them by kind (CLI command, mount daemon, CSI plugin, API server …).
The processes' start cost (imports) is measured per command by ``bench/startup/startup.py``;
this says how many times a run pays it.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ACCOUNT = Path(__file__).resolve().parent / "account"


def kind(argv: list[str]) -> str:
    """A process's kind from its command line (``python -m X ...`` or the ``datahub`` script)."""
    args = argv[1:]
    if "-m" in args:
        module = args[args.index("-m") + 1]
        if module == "datahub.cli.main":
            sub = [a for a in args[args.index("-m") + 2 :] if not a.startswith("-")]
            return "datahub serve" if "serve" in sub else "datahub (CLI command)"
        if module == "fuse_adapter":
            return "fuse_adapter (mount daemon / mount CLI)"
        if module == "pytest":
            return "pytest"
        return module
    if args and args[0].endswith("/datahub"):
        return "datahub (CLI command)"
    if args and args[0] == "-c":
        text = args[1] if len(args) > 1 else ""
        if "multiprocessing" in text:
            return "multiprocessing child"
        if "datahub" in text:
            return "python -c (datahub)"
        return "python -c (other)"
    return Path(args[0]).name if args else "python"


def summarise(log: Path) -> dict:
    starts: dict[int, dict] = {}
    exits: dict[int, dict] = {}
    for line in log.read_text().splitlines():
        rec = json.loads(line)
        (starts if rec["event"] == "start" else exits)[rec["pid"]] = rec
    rows: dict[str, dict] = collections.defaultdict(lambda: {"started": 0, "exited": 0, "cpu": 0.0})
    for pid, rec in starts.items():
        row = rows[kind(rec["argv"])]
        row["started"] += 1
        if pid in exits:
            row["exited"] += 1
            row["cpu"] += exits[pid]["cpu"]
    return dict(rows)


def print_summary(rows: dict) -> None:
    print(f"{'kind':<44} {'started':>8} {'exited':>7} {'CPU-s':>8} {'CPU-s each':>10}")
    for name, row in sorted(rows.items(), key=lambda kv: -kv[1]["cpu"]):
        each = row["cpu"] / row["exited"] if row["exited"] else float("nan")
        print(f"{name:<44} {row['started']:>8} {row['exited']:>7} {row['cpu']:>8.1f} {each:>10.3f}")
    total = sum(r["cpu"] for r in rows.values())
    procs = sum(r["started"] for r in rows.values())
    print(f"{'all Python processes':<44} {procs:>8} {'':>7} {total:>8.1f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", type=Path, default=ROOT, help="source tree to test (default: this checkout)")
    ap.add_argument("--log", type=Path, help="accounting log (default: a new temp file)")
    ap.add_argument("--summarise", type=Path, metavar="LOG", help="only print the summary of a log")
    ap.add_argument("tests", nargs="*")
    args = ap.parse_args()
    if args.summarise:
        print_summary(summarise(args.summarise))
        return 0
    log = args.log or Path(tempfile.mkstemp(prefix="datahub-account-", suffix=".jsonl")[1])
    log.write_text("")
    tree = args.tree.resolve()
    env = dict(os.environ, DATAHUB_ACCOUNT_LOG=str(log), PYTHONPATH=f"{ACCOUNT}:{tree}")
    load = Path("/proc/loadavg").read_text().split()[0]
    start = time.monotonic()
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args.tests]
    done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    wall = time.monotonic() - start
    tail = [line for line in done.stdout.splitlines() if line.strip()][-1:]
    print(f"tree {tree}; {' '.join(args.tests)}")
    print(f"pytest exit {done.returncode}, {wall:.0f} s wall, load {load} -> "
          f"{Path('/proc/loadavg').read_text().split()[0]}: {' '.join(tail)}; log {log}")  # fmt: skip
    print_summary(summarise(log))
    return 0


if __name__ == "__main__":
    sys.exit(main())
