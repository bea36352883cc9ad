"""Read a suite timeline (bench/suite/timeline.py) and print where each worker's time went.

    .venv/bin/python -m bench.suite.timeline_report var/timeline.jsonl [--top 25]

Per worker: when its collection ended, when its first test began and its last ended, the sum
of its tests' times and CPU, and its idle time at the end (the other worker still running).
Then the units (a file, or a SHARED_PACKAGES directory: tests/conftest.py ``scope_of``) by
time, with the worker each ran on and when, and the last units of each worker: the tail.
With ``--failure``: only the tests that began and never ended, and internal errors.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from tests.conftest import scope_of


def load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def units(events: list[dict]) -> dict[str, dict]:
    """scope -> worker, first start, last end, summed test time and CPU (and the process tree's
    CPU when the timeline has it), test count."""
    out: dict[str, dict] = {}
    for ev in events:
        if ev["ev"] != "test":
            continue
        u = out.setdefault(
            scope_of(ev["id"]), {"w": ev["w"], "t0": ev["t0"], "t1": ev["t"], "sum": 0.0, "cpu": 0.0, "n": 0}
        )
        u["t0"], u["t1"] = min(u["t0"], ev["t0"]), max(u["t1"], ev["t"])
        u["sum"] += ev["t"] - ev["t0"]
        u["cpu"] += ev["cpu"]
        if "tree" in ev:  # a run in a cpuacct cgroup of its own (bench/suite/timeline.py)
            u["tree"] = u.get("tree", 0.0) + ev["tree"]
        u["n"] += 1
    return out


def report(events: list[dict], top: int) -> str:
    zero = min(ev["t"] for ev in events if ev["ev"] == "start")
    lines = []
    by_worker: dict[str, list[dict]] = defaultdict(list)
    for ev in events:
        by_worker[ev["w"]].append(ev)
    ends = {}
    for w, evs in sorted(by_worker.items()):
        tests = [e for e in evs if e["ev"] == "test"]
        if not tests:
            continue
        collected = next((e for e in evs if e["ev"] == "collected"), None)
        ends[w] = max(e["t"] for e in tests) - zero
        busy = sum(e["t"] - e["t0"] for e in tests)
        lines.append(
            f"{w}: collected at {collected['t'] - zero:.1f} s ({collected['cpu']:.1f} CPU-s), "
            f"tests {min(e['t0'] for e in tests) - zero:.1f}–{ends[w]:.1f} s, {len(tests)} tests, "
            f"busy {busy:.1f} s, test CPU {sum(e['cpu'] for e in tests):.1f} s"
        )
    last = max(ends.values())
    if len(ends) > 1:  # xdist workers: the run's wall is the later one's end
        for w, end in sorted(ends.items()):
            lines.append(f"{w}: idle at the end {last - end:.1f} s")
    end_ev = [e for e in events if e["ev"] == "end" and e["w"] == "controller"]
    if end_ev:
        lines.append(f"controller: session {end_ev[0]['t'] - zero:.1f} s")
    us = units(events)
    tree = any("tree" in u for u in us.values())
    head = "seconds, CPU-s, tree CPU-s," if tree else "seconds, CPU-s,"
    lines.append(f"\nunits by time (top {top} of {len(us)}): {head} tests, worker, start–end")
    for scope, u in sorted(us.items(), key=lambda kv: -(kv[1]["t1"] - kv[1]["t0"]))[:top]:
        tree_col = f" {u.get('tree', 0.0):7.1f}" if tree else ""
        lines.append(
            f"{u['t1'] - u['t0']:7.1f} {u['cpu']:7.1f}{tree_col} {u['n']:4d} {u['w']} "
            f"{u['t0'] - zero:6.1f}–{u['t1'] - zero:6.1f} {scope}"
        )
    for w in sorted(ends):
        mine = sorted(((u["t0"], s, u) for s, u in us.items() if u["w"] == w), reverse=True)[:8]
        lines.append(f"\n{w}'s last units:")
        for _, scope, u in reversed(mine):
            lines.append(f"  {u['t0'] - zero:6.1f}–{u['t1'] - zero:6.1f} {u['t1'] - u['t0']:6.1f} s {scope}")
    return "\n".join(lines)


def failure_digest(events: list[dict]) -> str:
    """What a failed run's log may not show: per process, the tests that began and never
    ended (the one a hang or a crash was in) and the internal errors' last lines."""
    zero = min((ev["t"] for ev in events if ev["ev"] == "start"), default=0.0)
    ended = {(ev["w"], ev["id"]) for ev in events if ev["ev"] == "test"}
    lines = []
    for ev in events:
        if ev["ev"] == "begin" and (ev["w"], ev["id"]) not in ended:
            lines.append(f"{ev['w']}: began at {ev['t'] - zero:.1f} s and never ended: {ev['id']}")
        elif ev["ev"] == "internal":
            lines.append(f"{ev['w']}: internal error at {ev['t'] - zero:.1f} s:")
            lines.extend(f"  {line}" for line in ev["lines"])
        elif ev["ev"] == "end" and ev["w"] != "controller":
            lines.append(f"{ev['w']}: session ended at {ev['t'] - zero:.1f} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("timeline", type=Path)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument(
        "--failure",
        action="store_true",
        help="only the failure digest (make test prints it when a pass fails)",
    )
    args = ap.parse_args(argv)
    if not args.timeline.exists():
        return
    events = load(args.timeline)
    print(failure_digest(events) if args.failure else report(events, args.top))


if __name__ == "__main__":
    main()
