"""The longest gap between two successful writer-lease renewals of a loaded node (flaky21).

Why: write-back tests failed on a loaded machine (load 20-33 on 2 cores) with the holder
fenced for time: its renewal thread had not renewed within ``ttl - ttl/6``. This holds one
``WriterLease`` on a real SQLite catalog for ``--seconds`` while the node is busy the way a
training node (and a test process) is, and reports every renewal: when it started, how long
the catalog call took, the gap since the last successful one, and whether the holder fenced.

Load, each optional: ``--spin N`` processes of busy loops (the cores taken by others);
``--gil`` a thread of this process running Python bytecode (the flusher, a data loader);
``--commit-hold S`` another process holding the catalog's write lock for S seconds of every
``--commit-every`` (a long dataset commit on the same SQLite file).

``--schedule old`` is the schedule before flaky21 (``ttl / 3`` after the last attempt
*ended*, failed or not); ``new`` is ``WriterLease.next_wait``. Run both in one session for a
same-run baseline. CPU per renewal is the renewal thread's own CPU time in the catalog call.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sqlite3
import tempfile
import threading
import time
from pathlib import Path

from datahub.catalog.sqlite_store import SQLiteCatalogStore
from datahub.errors import Busy
from datahub.writeback.lease import WriterLease, since_boot


class OldSchedule(WriterLease):
    def next_wait(self) -> float:
        return self.ttl / 3


class Timed:
    """The catalog store, with each renewal's start, duration and thread CPU recorded."""

    def __init__(self, store: SQLiteCatalogStore) -> None:
        self.store, self.calls = store, []

    def acquire_lease(self, *args, **kwargs):
        while True:  # the lock holder may be mid-transaction at the start
            try:
                return self.store.acquire_lease(*args, **kwargs)
            except Busy:
                time.sleep(0.05)

    def release_lease(self, *args, **kwargs):
        return self.store.release_lease(*args, **kwargs)

    def renew_lease(self, *args, **kwargs):
        started, cpu = since_boot(), time.thread_time()
        ok = False
        try:
            result = self.store.renew_lease(*args, **kwargs)
            ok = True
            return result
        finally:
            self.calls.append((started, since_boot() - started, time.thread_time() - cpu, ok))


def _spin(stop: multiprocessing.Event) -> None:
    while not stop.is_set():
        sum(range(10_000))


def _hold(path: str, hold: float, every: float, stop: multiprocessing.Event) -> None:
    conn = sqlite3.connect(path, timeout=60, isolation_level=None)
    while not stop.is_set():
        conn.execute("BEGIN IMMEDIATE")
        time.sleep(hold)
        conn.execute("COMMIT")
        stop.wait(max(every - hold, 0.0))


def _commit_records(path: str, records: int, times: list, stop: multiprocessing.Event) -> None:
    """Real catalog commits of ``records`` new records each, one after another (leftovers22):
    each holds the catalog's write lock for its whole transaction."""
    from datahub.catalog import open_catalog
    from datahub.catalog.model import Put, Record

    catalog = open_catalog(f"sqlite:///{path}")
    round_ = 0
    while not stop.is_set():
        round_ += 1
        name = f"bulk{round_}"
        catalog.create_dataset(name)
        began = since_boot()
        changes = (Put(Record(f"k/{i:08d}", f"s3://b/k/{i:08d}", "e", 1)) for i in range(records))
        catalog.commit(name, changes, message="bulk")
        times.append(round(since_boot() - began, 2))
    catalog.close()


def run(args: argparse.Namespace) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="lease-gap-"))
    store = SQLiteCatalogStore(tmp / "catalog.db", busy_timeout_ms=int(args.busy_timeout * 1000))
    port = Timed(store)
    stop = multiprocessing.Event()
    procs = [multiprocessing.Process(target=_spin, args=(stop,)) for _ in range(args.spin)]
    if args.commit_hold:
        procs.append(
            multiprocessing.Process(
                target=_hold, args=(str(tmp / "catalog.db"), args.commit_hold, args.commit_every, stop)
            )
        )
    commits = multiprocessing.Manager().list() if args.commit_records else []
    if args.commit_records:
        procs.append(
            multiprocessing.Process(
                target=_commit_records, args=(str(tmp / "catalog.db"), args.commit_records, commits, stop)
            )
        )
    for proc in procs:
        proc.start()
    gil_stop = threading.Event()

    def bytecode() -> None:
        while not gil_stop.is_set():
            sum(i * i for i in range(1000))

    gil = threading.Thread(target=bytecode, daemon=True) if args.gil else None
    if gil:
        gil.start()
    kind = OldSchedule if args.schedule == "old" else WriterLease
    (tmp / "journal").mkdir()
    began = since_boot()
    lease = kind(port, "bench", "workspace 'bench'", tmp / "journal", ttl=args.ttl)
    fenced_at = None
    while since_boot() - began < args.seconds:
        time.sleep(0.05)
        if fenced_at is None and lease._lost is not None:
            fenced_at = since_boot() - began
    fenced = lease._lost
    lease.release()
    gil_stop.set()
    stop.set()
    for proc in procs:
        proc.join()
    store.close()
    ok = [c for c in port.calls if c[3]]
    return {
        "schedule": args.schedule,
        "ttl": args.ttl,
        "fence_after": round(args.ttl * 5 / 6, 2),
        "renewals": len(port.calls),
        "failed": len(port.calls) - len(ok),
        "longest_gap_s": round(lease.longest_gap, 3),
        "longest_call_s": round(max((c[1] for c in port.calls), default=0.0), 3),
        "cpu_ms_per_renewal": round(1000 * sum(c[2] for c in port.calls) / max(len(port.calls), 1), 2),
        "fenced": fenced,
        "fenced_at_s": None if fenced_at is None else round(fenced_at, 1),
        "commit_records": args.commit_records,
        "commit_seconds": list(commits),
        "load": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedule", choices=["old", "new"], default="new")
    parser.add_argument("--ttl", type=float, default=3.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--spin", type=int, default=0)
    parser.add_argument("--gil", action="store_true")
    parser.add_argument("--commit-hold", type=float, default=0.0)
    parser.add_argument("--commit-every", type=float, default=0.0)
    parser.add_argument("--busy-timeout", type=float, default=30.0)
    parser.add_argument("--commit-records", type=int, default=0, help="real commits of N records, in turn")
    print(json.dumps(run(parser.parse_args())))


if __name__ == "__main__":
    main()
