"""A relabel's commit cost: patches of every tenth record of a first version (suiteB27).

Why: ``tests/browser/test_million.py`` relabels 10^5 of 10^6 records through the catalog's
streamed commit, and its fixture spent about 110 µs per Patch, most of it in
``CommitPlanner.plan`` (``dataclasses.replace`` per patched record, each record compared with
its base up to five times). This measures that commit the fixture's way, in CPU seconds (the
machine is shared; wall is printed beside), and the planner alone on in-memory lookups, so
a change to ``revisions.py`` is seen without SQLite's share.

Usage: .venv/bin/python -m bench.catalog.relabel [--records 200000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from datahub.catalog import Patch, Put, open_catalog
from datahub.catalog.model import EMPTY, Record, record_from_row
from datahub.catalog.revisions import CommitPlanner, LiveRevision, batched

LABELS = [{"class": f"c{n}"} for n in range(7)]


def cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def key(i: int) -> str:
    return f"part-{i // 100_000}/{i:07d}.bin"


def record(i: int) -> Record:
    return record_from_row(key(i), f"memory://big/{i}", f"e{i}", 1000 + i % 5000, "", EMPTY, LABELS[i % 7])


def relabel(records: int) -> Iterator[Patch]:
    return (Patch(key(i), labels={"class": "checked"}) for i in range(0, records, 10))


def planner_only(records: int, batch: int = 2000) -> tuple[float, int]:
    """CPU seconds of ``CommitPlanner.plan`` over the relabel's batches, lookups from a dict."""
    live = {key(i): LiveRevision(record(i), 1) for i in range(0, records, 10)}
    planner = CommitPlanner("big", 1, lambda keys: {k: live[k] for k in keys if k in live}, lambda keys: {})
    batches = list(batched(relabel(records), batch))
    t = cpu()
    for b in batches:
        planner.plan(b)
    return cpu() - t, planner.modified


def commit(records: int, root: Path) -> tuple[float, float, int]:
    """CPU and wall seconds of the relabel's commit on a SQLite catalog of ``records``."""
    catalog = open_catalog(f"sqlite:///{root / 'catalog.db'}")
    try:
        catalog.create_dataset("big")
        catalog.store.commit("big", 0, (Put(record(i)) for i in range(records)), message="first")
        t, w = cpu(), time.perf_counter()
        version = catalog.store.commit("big", 1, relabel(records), message="relabel a tenth")
        return cpu() - t, time.perf_counter() - w, version.modified
    finally:
        catalog.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    patches = len(range(0, args.records, 10))
    for n in range(args.rounds):
        plan_cpu, modified = planner_only(args.records)
        assert modified == patches, modified
        with tempfile.TemporaryDirectory(prefix="relabel-") as tmp:
            commit_cpu, commit_wall, modified = commit(args.records, Path(tmp))
        assert modified == patches, modified
        print(
            f"round {n + 1}: {patches} patches; plan alone {plan_cpu / patches * 1e6:.1f} µs CPU/patch; "
            f"commit {commit_cpu / patches * 1e6:.1f} µs CPU/patch ({commit_cpu:.2f} CPU-s, {commit_wall:.2f} s wall)",
            flush=True,
        )


if __name__ == "__main__":
    main()
