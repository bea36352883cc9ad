"""The journal's group commit: concurrent callers share commits, errors stay with their caller."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from datahub.errors import InvalidInput, NotFound
from datahub.writeback.journal import Journal


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


def run_all(caller, count: int, hung: str) -> None:
    """Run ``caller(0..count-1)`` in threads; a lost wake-up fails after 60 s, never hangs."""
    threads = [threading.Thread(target=caller, args=(t,), daemon=True) for t in range(count)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), hung


def test_group_commit_hands_the_lead_on_until_every_caller_returns(tmp_path: Path) -> None:
    """Many callers over many batches: each one is woken exactly once, with its own result
    (a lost hand-off would leave a caller waiting forever: the join below gives up after 60 s)."""
    journal = Journal(tmp_path / "j", "workspace 't'")
    results: dict[tuple[int, int], object] = {}

    def caller(t: int) -> None:
        for i in range(150):
            results[t, i] = journal.apply(
                f"caller {t}/{i}", lambda txn, t=t, i=i: (txn.put_meta(f"{t}.{i}", "x"), (t, i))[1]
            )

    run_all(caller, 8, "a group-commit caller was never woken")
    assert results == {(t, i): (t, i) for t in range(8) for i in range(150)}
    with journal.read() as txn:
        assert all(txn.meta(f"{t}.{i}") == "x" for t in range(8) for i in range(150))
    journal.close()


def test_submitted_and_applied_commits_mix_and_each_gets_its_own_outcome(tmp_path: Path) -> None:
    """``submit`` queues without waiting (the committer thread leads when nobody else does);
    ``apply`` callers and submitters share batches; an error stays with its request."""
    journal = Journal(tmp_path / "j", "workspace 't'")
    outcomes: dict[tuple[int, int], object] = {}

    def change(t: int, i: int):
        def fn(txn):
            txn.put_meta(f"{t}.{i}", "x")
            if i % 7 == 3:
                raise NotFound(f"{t}.{i} fails")
            return t, i

        return fn

    def caller(t: int) -> None:
        for i in range(100):
            try:
                if t % 2:
                    outcomes[t, i] = journal.apply(f"{t}/{i}", change(t, i))
                else:
                    request = journal.submit(f"{t}/{i}", change(t, i))
                    outcomes[t, i] = request.wait()
                    assert request.wait() == outcomes[t, i]  # waiting again is allowed
            except NotFound as exc:
                outcomes[t, i] = exc

    lone = journal.submit("alone", lambda txn: txn.put_meta("alone", "1") or "done")
    assert lone.wait() == "done"  # no other caller: the committer thread led it
    run_all(caller, 6, "a caller or submitter was never woken")
    with journal.read() as txn:
        for (t, i), outcome in outcomes.items():
            if i % 7 == 3:
                assert isinstance(outcome, NotFound) and txn.meta(f"{t}.{i}") is None
            else:
                assert outcome == (t, i) and txn.meta(f"{t}.{i}") == "x"
        assert txn.meta("alone") == "1"
    assert len(outcomes) == 600
    journal.close()  # stops the committer thread
    assert journal._committer is not None and not journal._committer.is_alive()
    with pytest.raises(InvalidInput, match="closed"):
        journal.submit("late", lambda txn: None)
