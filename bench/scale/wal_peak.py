"""Disk peak of writing one version's rows: one WAL transaction, a rollback journal, WAL chunks.

    .venv/bin/python bench/scale/wal_peak.py [--rows 1000000] [--dir DIR]

The catalog's ``records`` row (10 columns, as ``sqlite_ceiling.py``), written three ways:
one ``BEGIN IMMEDIATE`` transaction in WAL mode (what a commit does today), one transaction
with a rollback journal (``journal_mode=DELETE``), and WAL transactions of 10^5 rows each
followed by ``wal_checkpoint(TRUNCATE)``. A thread samples the size of the file plus its
WAL or journal every 50 ms; prints the peak, the final file and their ratio.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
import threading
import time
from pathlib import Path

from sqlite_ceiling import INSERT, SCHEMA, rows  # type: ignore[import-not-found]


def run(path: Path, label: str, journal: str, n: int, chunk: int) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA journal_mode = {journal}")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("PRAGMA journal_size_limit = 67108864")
    conn.executescript(SCHEMA)
    peak, stop = [0], threading.Event()

    def sample() -> None:
        while not stop.is_set():
            files = (f"{path}{s}" for s in ("", "-wal", "-journal"))
            peak[0] = max(peak[0], sum(os.path.getsize(f) for f in files if os.path.exists(f)))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    cpu = time.process_time()
    for lo in range(0, n, chunk):
        conn.execute("BEGIN IMMEDIATE")
        for b in range(lo, min(n, lo + chunk), 2000):
            conn.executemany(INSERT, rows(b, min(n, lo + chunk, b + 2000)))
        conn.execute("COMMIT")
        if journal == "WAL":
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    cpu = time.process_time() - cpu
    stop.set()
    sampler.join()
    final = os.path.getsize(path)
    print(
        f"{label:46} peak {peak[0] / 2**20:6.0f} MiB, final file {final / 2**20:6.0f} MiB,"
        f" peak/final {peak[0] / final:4.2f}, {n / cpu:8,.0f} records/CPU-s | load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = Path(tmp) / "w.db"
        run(path, "WAL, one transaction (today)", "WAL", args.rows, args.rows)
        run(path, "rollback journal (DELETE), one transaction", "DELETE", args.rows, args.rows)
        run(path, "WAL, transactions of 10^5 rows + checkpoint", "WAL", args.rows, 100_000)


if __name__ == "__main__":
    main()
