"""A 1 % commit on top of a kept large version, and where its time goes (issue 38 item 3).

    .venv/bin/python bench/scale/small_commit.py --catalog DIR [--records 100000000]
        [--fraction 0.01] [--dataset big] [--profile] [--every 5] [--read-ahead-threads 4]

``DIR/catalog.db`` is a catalog kept by ``bench/scale/scale.py --layout tree --keep``
(dataset ``big``: v1 of ``--records`` records, then 1 % commits). This commits one more
version on the head, through the ``Catalog`` facade as ``scale.py``'s 1 % commit does:
``--fraction`` of v1's keys, one every ``1/fraction`` keys (60 % modified, 20 % deleted, 20 %
added), spread over the whole key space; each new version takes the keys at the next offset
(``(base - 1) * 211 mod 1/fraction``: other leaves than the runs before), so every run
changes keys no earlier run changed and deletes keys that exist. Added keys are new (``sNNN/...`` past every earlier run's).

It prints, every ``--every`` seconds, a timeline: changes handed to the catalog, this
process's CPU (user, system) and its caller's thread alone, bytes read and written
(``/proc/self/io``), the WAL's size; then the phases: reading and planning the change set
(until the last change is taken), the rest of the transaction (the last batch, the version
row), and the ``COMMIT`` with its checkpoint (SQLite's automatic checkpoint runs inside it),
and the totals with the load average. ``--profile`` adds a cProfile of the caller's thread
(Python's share; SQLite's statements show as their ``execute`` calls).
``--clustered`` changes one run of consecutive keys instead (``clustered_changes``: the
pages a commit touches grow with its changes, not with their spread).
``--read-ahead-threads 0`` commits without reading the next batch's pages ahead
(``sqlite_read_ahead``): run both in turns for an A/B on the same catalog.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.scale import scale  # noqa: E402
from datahub.catalog import Catalog, Delete, Put  # noqa: E402
from datahub.catalog.sqlite_read_ahead import READ_AHEAD_THREADS  # noqa: E402
from datahub.catalog.sqlite_store import SQLiteCatalogStore  # noqa: E402


def spread_changes(n: int, fraction: float, base: int) -> Iterator[Put | Delete]:
    """``fraction`` of v1's ``n`` keys at offset ``base - 1`` of every ``1/fraction``: 3 modified,
    1 deleted, 1 added (after every earlier run's additions) in every 5, in key order per kind
    as ``scale.small_changes``."""
    step = round(1 / fraction)
    offset = ((base - 1) * 211) % step  # leaves apart from the earlier runs' (~24 rows a leaf)
    added = n + base * (n // step + 1) * 2  # past v2's n + j and every earlier run's
    for j, i in enumerate(range(offset, n, step)):
        kind = j % 5
        if kind < 3:
            yield Put(scale.record(i, generation=base))
        elif kind == 3:
            yield Delete(scale.key_of(i))
        else:
            yield Put(scale.record(added + j))


def clustered_changes(n: int, fraction: float, base: int) -> Iterator[Put]:
    """``fraction`` of v1's ``n`` keys in ONE run of consecutive keys (a region of the key space,
    as a new shard of a dataset or a re-labelled directory): 4 modified puts and 1 added in
    every 5, no deletes (an earlier spread run may have deleted keys of the region; a put of
    one adds it back). Each version takes another region."""
    count = round(n * fraction)
    start = (base * 7919 * count) % (n - count)
    added = n + base * (count + 1) * 2 + 10**9  # apart from every spread run's additions
    for j, i in enumerate(range(start, start + count)):
        yield Put(scale.record(i, generation=base)) if j % 5 < 4 else Put(scale.record(added + j))


def evict(path: Path) -> None:
    """Drop ``path`` from the OS page cache (POSIX_FADV_DONTNEED): the next run starts cold."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def io_bytes() -> tuple[int, int]:
    fields = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    return int(fields["read_bytes"]), int(fields["write_bytes"])


class Timeline:
    """Samples this process every ``every`` s in a thread (CPU, I/O, the WAL's size)."""

    def __init__(self, db: Path, every: float) -> None:
        self.db, self.every = db, every
        self.handed = 0
        self.t0 = time.perf_counter()
        self.cpu0, self.io0 = os.times(), io_bytes()
        self.wal_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def wal(self) -> int:
        try:
            return Path(f"{self.db}-wal").stat().st_size
        except FileNotFoundError:
            return 0

    def line(self) -> str:
        t, cpu, (rd, wr) = time.perf_counter() - self.t0, os.times(), io_bytes()
        wal = self.wal()
        self.wal_peak = max(self.wal_peak, wal)
        return (
            f"  {t:7.1f} s  {self.handed:>9,} changes  CPU user {cpu.user - self.cpu0.user:7.1f} "
            f"sys {cpu.system - self.cpu0.system:6.1f} s  read {(rd - self.io0[0]) / 2**20:8,.0f} MiB  "
            f"written {(wr - self.io0[1]) / 2**20:8,.0f} MiB  WAL {wal / 2**20:7,.0f} MiB  load {os.getloadavg()[0]:.1f}"
        )

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            print(self.line(), flush=True)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--catalog", type=Path, required=True, help="a dir kept by scale.py --layout tree --keep")
    p.add_argument("--records", type=int, default=100_000_000, help="records of the dataset's v1")
    p.add_argument("--fraction", type=float, default=0.01)
    p.add_argument("--dataset", default="big")
    p.add_argument("--every", type=float, default=5.0, help="seconds between timeline lines")
    p.add_argument("--profile", action="store_true", help="cProfile the caller's thread")
    p.add_argument(
        "--clustered", action="store_true",
        help="the changed keys in one region of the key space (clustered_changes), not spread",
    )  # fmt: skip
    p.add_argument(
        "--evict", action="store_true",
        help="evict the catalog file from the OS page cache first (POSIX_FADV_DONTNEED): a cold start",
    )  # fmt: skip
    p.add_argument(
        "--read-ahead-threads", type=int, default=READ_AHEAD_THREADS,
        help="reader threads reading the next batch's pages ahead (0: none, as before)",
    )  # fmt: skip
    args = p.parse_args(argv)
    scale.key_of = scale.key_tree
    db = (args.catalog / "catalog.db").resolve()
    if args.evict:
        evict(db)
    catalog = Catalog(SQLiteCatalogStore(db, read_ahead_threads=args.read_ahead_threads))
    base = catalog.resolve(args.dataset).seq
    print(
        f"bench/scale/small_commit.py: {args.dataset}@v{base} of {db.stat().st_size / 2**30:.1f} GiB, "
        f"{args.fraction:.2%} of {args.records:,} keys {'clustered' if args.clustered else 'spread'} -> v{base + 1}, "
        f"{args.read_ahead_threads} read-ahead threads; "
        f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, load {os.getloadavg()}",
        flush=True,
    )
    timeline = Timeline(db, args.every)
    marks: dict[str, float] = {}

    def counted() -> Iterator[Put | Delete]:
        changes = clustered_changes if args.clustered else spread_changes
        for change in changes(args.records, args.fraction, base):
            timeline.handed += 1
            yield change
        marks["changes read"] = time.perf_counter()
        marks["changes read, thread CPU"] = time.thread_time()

    profiler = cProfile.Profile() if args.profile else None
    t0, c0, th0 = time.perf_counter(), os.times(), time.thread_time()
    if profiler:
        profiler.enable()
    version = catalog.commit(args.dataset, counted(), base=base, message="bench 1 % commit")
    if profiler:
        profiler.disable()
    wall, c1, own = time.perf_counter() - t0, os.times(), time.thread_time() - th0
    timeline.stop()
    print(timeline.line(), flush=True)
    catalog.close()
    user, system = c1.user - c0.user, c1.system - c0.system
    changes = version.added + version.removed + version.modified
    read_s = marks["changes read"] - t0
    print(
        f"\nv{version.seq}: {changes:,} changes ({version.added:,} added, {version.removed:,} removed, "
        f"{version.modified:,} modified)\n"
        f"  wall {wall:.1f} s: changes read and planned {read_s:.1f} s, then the last batch, the version row, "
        f"COMMIT and checkpoint {wall - read_s:.1f} s\n"
        f"  CPU {user + system:.1f} s (user {user:.1f}, system {system:.1f}) = {(user + system) / changes * 1e6:.0f} µs "
        f"per change; the caller's thread {own:.1f} s ({marks['changes read, thread CPU'] - th0:.1f} s until the "
        f"last change was read)\n"
        f"  WAL peak {timeline.wal_peak / 2**20:,.0f} MiB (sampled), load {os.getloadavg()}"
    )
    if profiler:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(25)
        print(out.getvalue())


if __name__ == "__main__":
    main()
