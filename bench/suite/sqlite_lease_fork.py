"""CPU per SQLite pool lease and per fork, for an A/B of ``datahub.sqlite_pool`` across commits.

Why: fork27 made every lease a section of the fork gate (``datahub.lmdb_fork.using``) and the
pool per process (``procs.PerProcess``), and every fork closes the pools' idle connections
(the child must inherit none), so the next lease after a fork opens a new connection. This
prints what each costs, so a suite A/B (``bench/suite/ab.sh``) can be read against it. Run it
with ``PYTHONPATH=<tree>`` for each tree, alternately::

    PYTHONPATH=$PWD .venv/bin/python bench/suite/sqlite_lease_fork.py
"""

from __future__ import annotations

import os
import resource
import tempfile
from collections.abc import Callable

from datahub.sqlite_pool import SQLiteConnections


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        pool = SQLiteConnections(os.path.join(tmp, "bench.db"))
        with pool.connection() as conn:
            conn.execute("CREATE TABLE t (a)")

        def lease(n: int) -> None:
            for _ in range(n):
                with pool.connection():
                    pass

        def lease_select(n: int) -> None:
            for _ in range(n):
                with pool.connection() as conn:
                    conn.execute("SELECT count(*) FROM t").fetchone()

        def fork_select(n: int) -> None:  # a child that exits at once, then one query
            for _ in range(n):
                pid = os.fork()
                if pid == 0:
                    os._exit(0)
                os.waitpid(pid, 0)
                with pool.connection() as conn:
                    conn.execute("SELECT count(*) FROM t").fetchone()

        runs: list[tuple[str, Callable[[int], None], int]] = [
            ("lease", lease, 100_000),
            ("lease+select", lease_select, 50_000),
            ("fork+wait+select", fork_select, 300),
        ]
        for name, fn, n in runs:
            best = float("inf")
            for _ in range(3):
                c0 = _cpu()
                fn(n)
                best = min(best, (_cpu() - c0) / n * 1e6)
            print(f"{name}: {best:.1f} CPU-us/op (best of 3 x {n}); connections opened {pool.opened_total}")
        pool.close()


if __name__ == "__main__":
    main()
