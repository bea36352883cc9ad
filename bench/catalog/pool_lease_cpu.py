"""CPU per pooled SQLite lease (``SQLiteConnections.connection()`` + ``SELECT 1``).

Why: since fork27 every lease is a section of the fork gate (``datahub.lmdb_fork.using``) and
finds its pool through ``procs.PerProcess`` (one ``os.getpid()``); this is the smallest unit of
catalog work that pays for it. Run it on two trees (``PYTHONPATH=<tree>``), alternating, for a
same-run A/B.

Usage: PYTHONPATH=. .venv/bin/python bench/catalog/pool_lease_cpu.py [--leases N] [--repeat R]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from datahub.sqlite_pool import SQLiteConnections


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--leases", type=int, default=50_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        pool = SQLiteConnections(Path(tmp) / "db", max_connections=4)
        with pool.connection() as conn:
            conn.execute("CREATE TABLE t (v)")
        best = float("inf")
        for _ in range(args.repeat):
            start = time.process_time()
            for _ in range(args.leases):
                with pool.connection() as conn:
                    conn.execute("SELECT 1").fetchone()
            best = min(best, time.process_time() - start)
        pool.close()
    print(f"lease + SELECT 1: {best / args.leases * 1e6:.2f} CPU-us (best of {args.repeat} x {args.leases})")


if __name__ == "__main__":
    main()
