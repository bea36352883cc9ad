"""Remote catalog vs direct SQLite (issue 16 goal: remote listing rate / direct >= 0.5).

    .venv/bin/python bench/catalog/remote_listing.py [--records 200000] [--fraction 0.01]

A SQLite catalog with ``--records`` records (v1) and a ``--fraction`` change (v2) is built
directly; then ``datahub serve --local`` runs over that file in its OWN process (127.0.0.1, a
free port; ``served`` of bench/api), so client and server do not share a GIL, as on a real node. In this process:

1. list v2 completely, direct (``sqlite:///``) and remote (``http://127.0.0.1:port``);
2. diff v1..v2 both ways;
3. commit a further ``--fraction`` change (puts of new etags) both ways (on two datasets of the same shape, so
   each commits onto the same base size).

Each figure is the best of ``--repeat`` runs (listing and diff: direct and remote alternate,
run by run), with the load average (``uptime``) printed beside each run: the machine may be
shared, and the ratio only means something when both sides ran under similar load. ``--profile FILE`` writes a cProfile of one remote listing (client side).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "api"))
from bench_import_api import served
from scale import full_changes, record, small_changes, uptime

from datahub.catalog import Put, open_catalog

GOAL = 0.5


def modify(n: int, fraction: float) -> Iterator[Put]:
    """``fraction`` of the records replaced (a new etag), spread over the key space."""
    return (Put(record(i, generation=2)) for i in range(0, n, round(1 / fraction)))


def best(label: str, fn: Callable[[], Any], repeat: int) -> tuple[float, Any, str]:
    """Best wall time of ``repeat`` runs, the value, and the load at the start."""
    load = uptime()
    times, value = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - start)
    print(f"{label:<32} {min(times):8.3f} s (best of {repeat}) | {load}", flush=True)
    return min(times), value, load


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--fraction", type=float, default=0.01)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", default=None, help="write a cProfile of one remote listing here")
    args = parser.parse_args()
    n = args.records
    workdir = tempfile.mkdtemp(prefix="bench-remote-listing-")
    db = os.path.join(workdir, "catalog.db")  # the server's home is workdir: its default catalog
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False)
    print(
        f"remote listing: {n:,} records, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"git {git.stdout.strip() or '?'}, {os.cpu_count()} CPUs"
    )
    env_url = os.environ.pop("DATAHUB_CATALOG_URL", None)  # the server's catalog is its home's
    try:
        direct = open_catalog(f"sqlite:///{db}")
        for name in ("direct", "remote"):
            direct.create_dataset(name)
            direct.commit(name, full_changes(n))
            direct.commit(name, small_changes(n, args.fraction))
        with served(workdir, "--local", "--no-labelx", "--host", "127.0.0.1") as (url, _port, pid):
            print(f"server pid {pid} at {url}")
            rows = measure(direct, open_catalog(url), n, args)
        direct.close()
    finally:
        if env_url is not None:
            os.environ["DATAHUB_CATALOG_URL"] = env_url
        shutil.rmtree(workdir, ignore_errors=True)
    table(rows)


def measure(direct: Any, remote: Any, n: int, args: argparse.Namespace) -> dict[str, dict[str, tuple]]:
    """The figures of both sides (each the best of ``--repeat``, with the load beside it)."""
    try:
        rows: dict[str, dict[str, tuple[float, Any, str]]] = {"direct": {}, "remote": {}}
        # the two sides alternate, run by run, so that both see the same (shared) machine
        for _ in range(args.repeat):
            for side, catalog in (("direct", direct), ("remote", remote)):
                for op, fn in (
                    ("list", lambda c=catalog: sum(1 for _ in c.list_records("direct", 2))),
                    ("diff", lambda c=catalog: sum(1 for _ in c.diff("direct", 1, 2))),
                ):
                    run = best(f"{side} {op} v2" if op == "list" else f"{side} diff v1..v2", fn, 1)
                    if op not in rows[side] or run[0] < rows[side][op][0]:
                        rows[side][op] = run
        for side, catalog in (("direct", direct), ("remote", remote)):
            rows[side]["commit"] = best(
                f"{side} commit {args.fraction:.0%}",
                lambda c=catalog, s=side: c.commit(s, modify(n, args.fraction), base=2),
                1,
            )
        if args.profile:
            cProfile.runctx(
                "sum(1 for _ in remote.list_records('direct', 2))",
                globals(),
                {"remote": remote},
                args.profile,
            )
            print(f"client profile written to {args.profile}")
    finally:
        remote.close()
    return rows


def table(rows: dict[str, dict[str, tuple]]) -> None:
    print()
    print("| operation | direct | remote | remote / direct | uptime (direct; remote) |")
    print("|---|---|---|---|---|")
    for op, unit in (("list", "records/s"), ("diff", "entries/s"), ("commit", "s")):
        (dt, dv, dl), (rt, rv, rl) = rows["direct"][op], rows["remote"][op]
        if op == "commit":
            d, r, ratio = f"{dt:.3f} s", f"{rt:.3f} s", dt / rt
        else:
            assert dv == rv, f"{op}: direct gave {dv}, remote {rv}"
            d, r, ratio = f"{dv / dt:,.0f} {unit}", f"{rv / rt:,.0f} {unit}", dt / rt
        la = lambda s: s.split("load average:")[-1].strip()  # noqa: E731
        print(f"| {op} | {d} | {r} | **{ratio:.2f}** | {la(dl)}; {la(rl)} |")
    ratio = rows["direct"]["list"][0] / rows["remote"]["list"][0]
    print(
        f"\nlisting rate remote / direct = {ratio:.3f} (goal >= {GOAL}: {'met' if ratio >= GOAL else 'MISSED'})"
    )


if __name__ == "__main__":
    main()
