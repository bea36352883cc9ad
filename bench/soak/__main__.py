"""``python -m bench.soak [--minutes M | --seconds S] [--seed N] [--out DIR]``: one soak run.

Prints the schedule first, then the report (text); writes ``report.json`` and
``report.txt`` in the run's directory. Exits 1 if any invariant broke. Needs root
(network namespaces, tmpfs, FUSE), like tests/multihost.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
from pathlib import Path

from bench.soak.report import text
from bench.soak.run import Soak
from bench.soak.schedule import KINDS
from tests.multihost.netns import netns_refusal


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    length = ap.add_mutually_exclusive_group()
    length.add_argument("--seconds", type=float)
    length.add_argument("--minutes", type=float)
    ap.add_argument("--seed", type=int, default=26)
    ap.add_argument("--kinds", default=",".join(KINDS), help="fault kinds, comma-separated (default: all)")
    ap.add_argument("--out", default="", help="the run's directory (default: a new one under /tmp)")
    args = ap.parse_args(argv)
    seconds = args.seconds or (args.minutes or 1.0) * 60
    refusal = netns_refusal()
    if refusal:
        print(f"the soak cannot run here: {refusal}", file=sys.stderr)
        return 2
    root = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="dh-soak-"))
    root.mkdir(parents=True, exist_ok=True)
    soak = Soak(root.resolve(), args.seed, seconds, tuple(k for k in args.kinds.split(",") if k))
    print(
        f"soak in {root}: seed {args.seed}, {seconds:.0f} s, {len(soak.schedule)} faults scheduled",
        flush=True,
    )
    for f in soak.schedule:
        print(f"  {f.at:8.2f} s  {f.kind:<16} {f.target:<8} {f.seconds:5.2f} s", flush=True)
    # SIGTERM unwinds like Ctrl-C, so every namespace, mount and process is removed
    signal.signal(signal.SIGTERM, _interrupt)
    report = soak.run()
    (root / "report.json").write_text(json.dumps(report, indent=1))
    (root / "report.txt").write_text(text(report) + "\n")
    print(text(report), flush=True)
    return 1 if report["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
