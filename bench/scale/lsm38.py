"""Issue 38 (lsm38): a spread 1 % commit in today's layout, in cheaper variants of it, and in
the delta layout (``lsm38_delta.py``), measured side by side in one run.

    nice .venv/bin/python bench/scale/lsm38.py --records 10000000 --dir /var/tmp/lsm38 \\
        [--fraction 0.01] [--rounds 2] [--deltas 1,10,50] [--fold-chunk 5000] [--keep]

1. **The full commit**: ``datahub commit --changes`` of ``--records`` records reading a pipe
   (``cli_commit_pipe.py``: the commit's process measured alone, its generator apart) — the
   figure the ≤ 3 % goal divides by. Its catalog is copied: one copy takes today's commits
   (``inplace``), the other the delta layout's (``lsm``); both start warm.
2. **Commits in turns**, each on its own copy's head, the same change set
   (``small_commit.spread_changes``: one key every ``1/fraction``, 60 % modified, 20 % deleted,
   20 % added; base ``b`` takes the keys at offset ``b``): today's commit through the
   ``Catalog`` (planner, read-ahead, writer thread), the blind delta commit, the counted delta
   commit (it reads each key's state at the base, as any commit that must know its counts).
   CPU is the whole process's (every thread), wall includes COMMIT and its checkpoint.
3. **Variants of today's layout** (real commits unless said): the change set sorted by key
   before the commit; a 512 MiB page cache; and, as raw SQL with no planner (rolled back, so
   without the checkpoint), the closes then the inserts of each batch against each key's
   close and insert done in one pass.
4. **Reads** (warm; CPU of the reading thread per operation): a lookup, a listing page of
   1,000, a directory page of 1,000 (the mount's paged tree: the root's subdirectories, a
   folder's files), a diff page of 50 (the API's) from the previous version and from v1; by
   the real store on ``inplace``'s head, and by ``View`` with 0 deltas and with each of
   ``--deltas`` unfolded deltas.
5. **The fold** of every delta, ``--fold-chunk`` keys per transaction, while a reader thread
   reads (a lookup and a listing page, each in its own snapshot) and a writer thread commits
   blind 0.01 % deltas; then the folded catalog read by the real store, checked against the
   pages ``View`` returned before the fold.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from itertools import islice
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.scale import cli_commit_pipe, scale  # noqa: E402
from bench.scale import lsm38_delta as lsm  # noqa: E402
from bench.scale.small_commit import io_bytes, spread_changes  # noqa: E402
from datahub.catalog import Catalog, Delete, Put  # noqa: E402
from datahub.catalog.revisions import OPEN, batched  # noqa: E402
from datahub.catalog.sqlite_schema import dump_json, record_of_row  # noqa: E402
from datahub.catalog.sqlite_store import SQLiteCatalogStore  # noqa: E402


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


class Meter:
    """Wall, whole-process CPU and disk bytes of a block."""

    def __enter__(self) -> Meter:
        self.t0, self.c0, self.io0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF), io_bytes()
        return self

    def __exit__(self, *exc: object) -> None:
        c1, io1 = resource.getrusage(resource.RUSAGE_SELF), io_bytes()
        self.wall = time.perf_counter() - self.t0
        self.user, self.sys = c1.ru_utime - self.c0.ru_utime, c1.ru_stime - self.c0.ru_stime
        self.cpu = self.user + self.sys
        self.read, self.written = io1[0] - self.io0[0], io1[1] - self.io0[1]

    def line(self, n: int, full: dict[str, float] | None) -> str:
        ratio = (
            f"; {self.cpu / full['cpu_s']:.2%} of the full commit's CPU, {self.wall / full['wall_s']:.2%} of its wall"
            if full
            else ""
        )
        return (
            f"wall {self.wall:.2f} s, CPU {self.cpu:.2f} s (user {self.user:.2f}, sys {self.sys:.2f}) = "
            f"{self.cpu / n * 1e6:.1f} µs per change; read {self.read / 2**20:,.0f} MiB, written "
            f"{self.written / 2**20:,.0f} MiB{ratio}; load {load()}"
        )


def changes(n: int, fraction: float, base: int) -> Iterator[Put | Delete]:
    return spread_changes(n, fraction, base)


def real_commit(
    db: Path, n: int, fraction: float, *, sort: bool = False, cache_mib: int = 16
) -> tuple[Meter, int]:
    catalog = Catalog(SQLiteCatalogStore(db, cache_mib=cache_mib))
    try:
        base = catalog.resolve("big").seq
        with Meter() as m:
            stream: Any = changes(n, fraction, base)
            if sort:
                stream = sorted(stream, key=lambda c: c.record.key if isinstance(c, Put) else c.key)
            v = catalog.commit("big", stream, base=base, message="lsm38 1 % commit")
    finally:
        catalog.close()
    return m, v.added + v.removed + v.modified


def delta_commit(db: Path, n: int, fraction: float, counted: bool) -> tuple[Meter, int]:
    conn = lsm.connect(db)
    try:
        base = lsm.head(conn, lsm.dataset_id(conn, "big"))
        count = 0

        def counting() -> Iterator[Put | Delete]:
            nonlocal count
            for c in changes(n, fraction, base):
                count += 1
                yield c

        with Meter() as m:
            lsm.commit(conn, "big", counting(), counted=counted)
    finally:
        conn.close()
    return m, count


def raw_inplace(db: Path, n: int, fraction: float, one_pass: bool) -> tuple[Meter, int]:
    """Today's writes as raw SQL (no planner, no read-ahead): per batch the lookups, then the
    closes and the inserts (``one_pass``: each key's close and insert together), rolled back."""
    conn = lsm.connect(db)
    ds = lsm.dataset_id(conn, "big")
    base = lsm.head(conn, ds)
    new, count = base + 1, 0
    close_sql = "UPDATE records SET to_seq = ? WHERE dataset_id = ? AND key = ? AND from_seq = ?"
    insert_sql = "INSERT OR REPLACE INTO records VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    try:
        with Meter() as m:
            conn.execute("BEGIN IMMEDIATE")
            for batch in batched(changes(n, fraction, base), 2000):
                keys = [c.record.key if isinstance(c, Put) else c.key for c in batch]
                count += len(keys)
                live: dict[str, int] = {}
                for i in range(0, len(keys), 500):
                    part = keys[i : i + 500]
                    live.update(
                        (k, f)
                        for k, f in conn.execute(
                            f"SELECT key, from_seq FROM records WHERE dataset_id = ? AND key IN ({','.join('?' * len(part))})"
                            " AND to_seq = ?",
                            (ds, *part, OPEN),
                        )
                    )
                ops = []
                for c in sorted(batch, key=lambda c: c.record.key if isinstance(c, Put) else c.key):
                    k = c.record.key if isinstance(c, Put) else c.key
                    close = (new, ds, k, live[k]) if k in live else None
                    ins = None
                    if isinstance(c, Put):
                        r = c.record
                        ins = (
                            ds,
                            k,
                            new,
                            OPEN,
                            r.url,
                            r.etag,
                            r.size,
                            r.checksum or None,
                            dump_json(r.meta),
                            dump_json(r.labels),
                        )
                    ops.append((close, ins))
                if one_pass:
                    for close, ins in ops:
                        if close:
                            conn.execute(close_sql, close)
                        if ins:
                            conn.execute(insert_sql, ins)
                else:
                    conn.executemany(close_sql, [c for c, _ in ops if c])
                    conn.executemany(insert_sql, [i for _, i in ops if i])
            conn.execute("ROLLBACK")
    finally:
        conn.close()
    return m, count


# --- reads -----------------------------------------------------------------------------------
def sample_keys(db: Path, n: int, k: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return sorted(scale.key_of(rng.randrange(n)) for _ in range(k))


def per_op(fn: Callable[[Any], Any], args: list[Any]) -> tuple[float, float]:
    """(µs of this thread's CPU, µs of wall) per call, after one warm-up pass over 1/4 of them."""
    for a in args[: max(1, len(args) // 4)]:
        fn(a)
    c0, t0 = time.thread_time(), time.perf_counter()
    for a in args:
        fn(a)
    return (time.thread_time() - c0) / len(args) * 1e6, (time.perf_counter() - t0) / len(args) * 1e6


def real_reads(db: Path, keys: list[str], folders: list[str], samples: int) -> dict[str, tuple[float, float]]:
    catalog = Catalog(SQLiteCatalogStore(db))
    try:
        v = catalog.resolve("big").seq
        ops: dict[str, tuple[Callable[[Any], Any], list[Any]]] = {
            "lookup": (lambda k: catalog.store.get_records("big", v, [k]), keys[:samples]),
            "listing page (1,000)": (lambda k: list(catalog.store.list_records("big", v, start_after=k, limit=1000)), keys[: max(2, samples // 50)]),
            "root page (1,000 subdirs)": (lambda _: list(catalog.store.list_directory("big", v, prefix="train/", limit=1000)), [None] * 3),
            "folder page (1,000 files)": (lambda p: list(catalog.store.list_directory("big", v, prefix=p, limit=1000)), folders),
            "diff page (50) from the previous version": (lambda _: list(islice(catalog.store.diff("big", v - 1, v), 50)), [None] * 5),
            "diff page (50) from v1": (lambda _: list(islice(catalog.store.diff("big", 1, v), 50)), [None] * 5),
        }  # fmt: skip
        return {name: per_op(fn, args) for name, (fn, args) in ops.items()}
    finally:
        catalog.close()


def view_reads(
    db: Path, seq: int, keys: list[str], folders: list[str], samples: int
) -> dict[str, tuple[float, float]]:
    conn = lsm.connect(db)
    try:
        ds = lsm.dataset_id(conn, "big")
        view = lsm.View(conn, ds, seq)
        prev = max(1, seq - 1)
        ops: dict[str, tuple[Callable[[Any], Any], list[Any]]] = {
            "lookup": (lambda k: view.get_many([k]), keys[:samples]),
            "listing page (1,000)": (lambda k: view.list_page(k, 1000), keys[: max(2, samples // 50)]),
            "root page (1,000 subdirs)": (lambda _: view.directory_page("train/", limit=1000), [None] * 3),
            "folder page (1,000 files)": (lambda p: view.directory_page(p, limit=1000), folders),
            "diff page (50) from the previous version": (lambda _: view.diff_page(prev, limit=50), [None] * 5),
            "diff page (50) from v1": (lambda _: view.diff_page(1, limit=50), [None] * 5),
        }  # fmt: skip
        if seq == 1:
            ops.pop("diff page (50) from the previous version")
            ops.pop("diff page (50) from v1")
        return {name: per_op(fn, args) for name, (fn, args) in ops.items()}
    finally:
        conn.close()


def print_reads(label: str, got: dict[str, tuple[float, float]]) -> None:
    for name, (cpu, wall) in got.items():
        print(f"  reads | {label:<34} | {name:<42} | CPU {cpu:10.1f} µs | wall {wall:10.1f} µs", flush=True)


# --- the fold beside readers and a writer ----------------------------------------------------
def fold_beside(db: Path, n: int, chunk: int, deltas: int | None = None, pause: float = 0.15) -> None:
    """Fold the first ``deltas`` unfolded deltas (all: None) beside a reader and a writer thread."""
    stop = threading.Event()
    reads: list[float] = []
    commits: list[float] = []
    errors: list[BaseException] = []
    keys = sample_keys(db, n, 200, 7)

    def reader() -> None:
        conn = lsm.connect(db)
        ds = lsm.dataset_id(conn, "big")
        i = 0
        try:
            while not stop.is_set():
                t0 = time.perf_counter()
                conn.execute("BEGIN")
                view = lsm.View(conn, ds, lsm.head(conn, ds))
                view.get_many([keys[i % len(keys)]])
                view.list_page(keys[i % len(keys)], 1000)
                conn.execute("COMMIT")
                reads.append(time.perf_counter() - t0)
                i += 1
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            conn.close()

    def writer() -> None:
        conn = lsm.connect(db)
        try:
            while not stop.wait(1.0):
                base = lsm.head(conn, lsm.dataset_id(conn, "big"))
                t0 = time.perf_counter()
                lsm.commit(conn, "big", spread_changes(n, max(0.0001, 10 / n), base))
                commits.append(time.perf_counter() - t0)
        except BaseException as exc:
            errors.append(exc)
        finally:
            conn.close()

    conn = lsm.connect(db)
    ds = lsm.dataset_id(conn, "big")
    first = conn.execute("SELECT min(seq) FROM lsm_versions WHERE dataset_id = ?", (ds,)).fetchone()[0]
    top = lsm.head(conn, ds) if deltas is None else first + deltas - 1
    rows = conn.execute(
        "SELECT count(*) FROM lsm_delta WHERE dataset_id = ? AND seq <= ?", (ds, top)
    ).fetchone()[0]
    wal = Path(f"{db}-wal")
    wal_peak = [0]
    chunk_walls: list[float] = []
    last = [time.perf_counter()]

    def after_chunk(stats: lsm.FoldStats) -> None:
        now = time.perf_counter()
        chunk_walls.append(now - last[0])
        last[0] = now
        if wal.exists():
            wal_peak[0] = max(wal_peak[0], wal.stat().st_size)

    threads = [threading.Thread(target=reader), threading.Thread(target=writer)]
    for t in threads:
        t.start()
    th0 = time.thread_time()
    with Meter() as m:
        stats = lsm.fold(conn, "big", upto=top, chunk=chunk, after_chunk=after_chunk, pause=pause)
    own = time.thread_time() - th0
    stop.set()
    for t in threads:
        t.join()
    conn.close()
    if errors:
        raise errors[0]
    print(
        f"fold of v{stats.versions[0]}..v{stats.versions[-1]} ({len(stats.versions)} deltas, {rows:,} delta rows): "
        f"{stats.keys:,} keys, {stats.closes:,} closes, {stats.inserts:,} inserts in {stats.transactions} "
        f"transactions; wall {m.wall:.1f} s; the fold's thread {own:.1f} CPU-s ({own / max(1, rows) * 1e6:.1f} µs per "
        f"delta row); process CPU {m.cpu:.1f} s (with the reader and writer threads); read {m.read / 2**20:,.0f} MiB, "
        f"written {m.written / 2**20:,.0f} MiB; WAL peak {wal_peak[0] / 2**20:,.0f} MiB; a chunk's transaction "
        f"median {statistics.median(chunk_walls) * 1e3:.0f} ms, max {max(chunk_walls) * 1e3:.0f} ms; load {load()}",
        flush=True,
    )
    print(
        f"  beside it: {len(reads):,} reads (a lookup and a listing page each, own snapshot): median "
        f"{statistics.median(reads) * 1e3:.1f} ms, max {max(reads) * 1e3:.1f} ms; {len(commits)} blind commits of "
        f"{round(n * max(0.0001, 10 / n)):,} changes: median {statistics.median(commits) * 1e3:.0f} ms, max "
        f"{max(commits) * 1e3:.0f} ms"
        if reads and commits
        else f"  beside it: {len(reads)} reads, {len(commits)} commits",
        flush=True,
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, default=10_000_000)
    p.add_argument("--fraction", type=float, default=0.01)
    p.add_argument("--dir", type=Path, help="where the catalogs go (required unless --fold-only)")
    p.add_argument("--rounds", type=int, default=2, help="turns of (today, blind delta, counted delta)")
    p.add_argument("--deltas", default="1,10,50", help="unfolded deltas at which reads are measured")
    p.add_argument("--fold-chunk", type=int, default=5000, help="keys per fold transaction")
    p.add_argument(
        "--fold-pause",
        type=float,
        default=0.15,
        help="seconds the fold gives way between chunks (0: none; a waiting commit then timed out at 10^7)",
    )
    p.add_argument(
        "--samples", type=int, default=2000, help="lookups per read row (listing pages: 1/50 of it)"
    )
    p.add_argument(
        "--fold-only", type=Path, help="only fold the oldest deltas of this lsm catalog.db, in turns"
    )
    p.add_argument("--fold-deltas", default="1,10", help="--fold-only: deltas folded in each turn")
    p.add_argument("--skip-variants", action="store_true", help="skip step 3")
    p.add_argument("--keep", action="store_true")
    args = p.parse_args(argv)
    n, f = args.records, args.fraction
    if (
        args.fold_only is not None
    ):  # a catalog kept by --keep (or a run stopped by SIGTERM): its oldest deltas
        print(
            f"bench/scale/lsm38.py --fold-only: {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, load {load()}"
        )
        for k in (int(x) for x in args.fold_deltas.split(",")):
            fold_beside(args.fold_only, n, args.fold_chunk, k, args.fold_pause)
        return
    scale.key_of = scale.key_flat  # cli_commit_pipe's keys: train/DDDDD/NNNNNNNNN.jpg
    args.dir.mkdir(parents=True, exist_ok=True)
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    print(
        f"bench/scale/lsm38.py: {n:,} records, {f:.2%} spread commits, git {git.stdout.strip()}, "
        f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, load {load()}",
        flush=True,
    )
    before = set(args.dir.glob("cli-commit-pipe-*"))
    full = cli_commit_pipe.main(["--records", str(n), "--dir", str(args.dir), "--keep"])
    (work,) = set(args.dir.glob("cli-commit-pipe-*")) - before
    inplace = work / "home" / "catalog.db"
    lsm_db = args.dir / "lsm" / "catalog.db"
    lsm_db.parent.mkdir(exist_ok=True)
    t0 = time.perf_counter()
    shutil.copyfile(inplace, lsm_db)
    print(
        f"copied the catalog ({inplace.stat().st_size / 2**30:.2f} GiB) in {time.perf_counter() - t0:.1f} s",
        flush=True,
    )
    try:
        c0 = time.thread_time()
        count = sum(1 for _ in changes(n, f, 1000))
        gen = (time.thread_time() - c0) / count * 1e6
        print(f"the change set's generator alone: {gen:.1f} µs per change ({count:,} changes)", flush=True)

        print("\ncommits in turns (each a new version of its copy):", flush=True)
        for r in range(args.rounds):
            for label, run in (
                ("today (Catalog.commit)", lambda: real_commit(inplace, n, f)),
                ("delta, blind", lambda: delta_commit(lsm_db, n, f, counted=False)),
                ("delta, counted", lambda: delta_commit(lsm_db, n, f, counted=True)),
            ):
                m, c = run()
                print(f"  round {r + 1} | {label:<32} | {c:,} changes | {m.line(c, full)}", flush=True)
        print("\nvariants of today's layout:", flush=True)
        for label, run in (
            ()
            if args.skip_variants
            else (
                ("today, change set sorted first", lambda: real_commit(inplace, n, f, sort=True)),
                ("today, 512 MiB page cache", lambda: real_commit(inplace, n, f, cache_mib=512)),
                (
                    "raw SQL, closes then inserts (rolled back)",
                    lambda: raw_inplace(inplace, n, f, one_pass=False),
                ),
                ("raw SQL, one pass (rolled back)", lambda: raw_inplace(inplace, n, f, one_pass=True)),
                ("today (Catalog.commit) again", lambda: real_commit(inplace, n, f)),
            )
        ):
            m, c = run()
            print(f"  {label:<44} | {c:,} changes | {m.line(c, full)}", flush=True)

        print("\nreads (warm):", flush=True)
        keys = sample_keys(inplace, n, args.samples, 1)
        folders = [
            f"train/{i:05d}/"
            for i in random.Random(2).sample(
                range(max(1, n // scale.PER_DIR)), min(3, max(1, n // scale.PER_DIR))
            )
        ]
        print_reads("today's store, its head", real_reads(inplace, keys, folders, args.samples))
        print_reads("View, 0 deltas (v1)", view_reads(lsm_db, 1, keys, folders, args.samples))
        conn = lsm.connect(lsm_db)
        ds = lsm.dataset_id(conn, "big")
        captured: dict[str, Any] = {}
        targets = sorted(int(x) for x in args.deltas.split(","))
        while conn.execute("SELECT count(*) FROM lsm_versions").fetchone()[0] < targets[-1]:
            m, c = delta_commit(lsm_db, n, f, counted=False)
            print(f"  (blind delta commit {lsm.head(conn, ds)}: {m.line(c, full)})", flush=True)
        first = conn.execute("SELECT min(seq) FROM lsm_versions").fetchone()[0]
        for target in targets:  # version first + target - 1 reads exactly `target` deltas
            seq = first + target - 1
            assert len(lsm.View(conn, ds, seq).deltas) == target
            print_reads(
                f"View, {target} deltas (v{seq})", view_reads(lsm_db, seq, keys, folders, args.samples)
            )
        top = lsm.head(conn, ds)
        view = lsm.View(conn, ds, top)
        captured = {"list": view.list_page(keys[5], 1000), "diff": view.diff_page(top - 1, limit=50),
                    "diff1": view.diff_page(1, limit=50), "get": view.get_many(keys[:50])}  # fmt: skip
        conn.close()
        size = sum(p.stat().st_size for p in lsm_db.parent.glob("catalog.db*"))
        print(f"  the lsm copy holds {size / 2**30:.2f} GiB with its deltas", flush=True)

        print("\nthe fold:", flush=True)
        fold_beside(lsm_db, n, args.fold_chunk, pause=args.fold_pause)
        conn = lsm.connect(lsm_db)
        t0 = time.perf_counter()
        rest = lsm.fold(conn, "big", chunk=args.fold_chunk)  # the writer thread's deltas
        print(
            f"  then the writer's {len(rest.versions)} deltas folded in {time.perf_counter() - t0:.1f} s",
            flush=True,
        )
        conn.execute("UPDATE datasets SET dirs = 0")  # the prototype's fold keeps no directory table
        conn.close()
        catalog = Catalog(SQLiteCatalogStore(lsm_db))
        try:
            same = (
                list(catalog.list_records("big", top, start_after=keys[5], limit=1000)) == captured["list"]
                and list(islice(catalog.diff("big", top - 1, top), 50)) == captured["diff"]
                and list(islice(catalog.diff("big", 1, top), 50)) == captured["diff1"]
                and catalog.store.get_records("big", top, keys[:50])
                == {k: record_of_row(row) for k, row in captured["get"].items()}
            )  # fmt: skip
        finally:
            catalog.close()
        print(f"  the real store reads the folded v{top} as View read it before the fold: {same}", flush=True)
        print_reads("today's store on the folded copy", real_reads(lsm_db, keys, folders, args.samples))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
            shutil.rmtree(lsm_db.parent, ignore_errors=True)
    print(f"\ndone {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, load {load()}", flush=True)


if __name__ == "__main__":
    main()
