"""The journal's group commit: concurrent callers share commits, errors stay with their caller."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from datahub.cache.writeback.journal import Journal
from datahub.errors import InvalidInput, NotFound


def test_group_commit_isolates_each_callers_error(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j", "workspace 't'")
    start = threading.Barrier(16)
    outcomes: dict[int, object] = {}

    def caller(n: int) -> None:
        def change(txn):
            txn.put_meta(f"k{n}", str(n))
            if n % 3 == 0:
                raise NotFound(f"caller {n} fails")
            return n

        start.wait()
        try:
            outcomes[n] = journal.apply(f"caller {n}", change)
        except NotFound as exc:
            outcomes[n] = exc

    threads = [threading.Thread(target=caller, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with journal.read() as txn:
        for n in range(16):
            if n % 3 == 0:
                assert isinstance(outcomes[n], NotFound) and txn.meta(f"k{n}") is None
            else:
                assert outcomes[n] == n and txn.meta(f"k{n}") == str(n)
    journal.close()
    with pytest.raises(InvalidInput, match="closed"):
        journal.apply("late", lambda txn: None)
