"""leftovers22: ``Journal.submit`` when the committer thread cannot start.

``submit`` queued its request and took the lead for the committer thread, then
``Thread.start`` raised (no threads or memory left): the caller saw an error for a change
still queued, the unstarted thread was kept (never started again, ``close`` could not join
it), and nothing led the queue any more: every later commit waited forever. Now a request
is either queued and its outcome reported by ``wait()``, or not queued and an error: when
the thread cannot start, the caller commits the batch itself, and a later call starts it.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from datahub.writeback.journal import Journal


@pytest.fixture
def start_fails_once(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The next ``Thread.start`` raises as CPython does when no thread can be made."""
    real = threading.Thread.start
    refused: list[str] = []

    def start(self: threading.Thread) -> None:
        if not refused:
            refused.append(self.name)
            raise RuntimeError("can't start new thread")
        real(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    return refused


def _in_thread(fn) -> None:
    """Run ``fn`` where a hang is seen as a failure, not as a test that never ends."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(30)  # a hang's limit, not a timing: a commit takes milliseconds
    assert not t.is_alive(), "the journal stopped leading its queue: a commit waits for ever"
    assert errors == []


def test_a_submit_whose_committer_cannot_start_commits_and_reports_its_outcome(
    tmp_path: Path, start_fails_once: list[str]
) -> None:
    journal = Journal(tmp_path / "lmdb", "workspace 'leftovers22'")
    try:
        request = journal.submit("create of 'a'", lambda txn: txn.put_entry("a", {"t": "f", "id": 1}) or "a")
        assert start_fails_once, "the committer thread was not asked to start"
        assert request.wait() == "a"
        with journal.read() as txn:
            assert txn.entry("a") == {"t": "f", "id": 1}
        # the journal still leads its queue, and starts its committer at the next submit
        _in_thread(
            lambda: journal.apply("create of 'b'", lambda txn: txn.put_entry("b", {"t": "f", "id": 2}))
        )
        _in_thread(
            lambda: journal.submit(
                "create of 'c'", lambda txn: txn.put_entry("c", {"t": "f", "id": 3})
            ).wait()
        )
        assert journal._committer is not None and journal._committer.is_alive()
    finally:
        _in_thread(journal.close)
    again = Journal(tmp_path / "lmdb", "workspace 'leftovers22'")
    try:
        with again.read() as txn:
            assert [txn.entry(p) for p in "abc"] == [{"t": "f", "id": n} for n in (1, 2, 3)]
    finally:
        again.close()


def test_a_failing_submit_whose_committer_cannot_start_reports_its_own_error(
    tmp_path: Path, start_fails_once: list[str]
) -> None:
    """The outcome is the request's own: its error from ``wait()``, not the thread's."""
    journal = Journal(tmp_path / "lmdb", "workspace 'leftovers22'")

    def refuse(txn) -> None:
        raise FileExistsError("'a' exists")

    try:
        request = journal.submit("create of 'a'", refuse)
        with pytest.raises(FileExistsError, match="'a' exists"):
            request.wait()
    finally:
        _in_thread(journal.close)


def test_a_covered_submit_whose_committer_cannot_start_is_recorded_and_written(
    tmp_path: Path, start_fails_once: list[str]
) -> None:
    """A covered request is recorded at once and wakes the committer to write it later: that
    wake-up raised after the record was made (an acknowledged close reported as failed)."""
    journal = Journal(tmp_path / "lmdb", "workspace 'leftovers22'")
    journal.start_covers(1)
    try:
        request = journal.submit(
            "create of 'a'", lambda txn: txn.put_entry("a", {"t": "f", "id": 1}), covered=True
        )
        assert request.wait() is None
        assert request.cover == 2, "the request was not deferred (covered): the test misses its path"
        assert start_fails_once
        assert journal.deferred() == 0  # written by the caller: no thread would write it later
        with journal.read() as txn:
            assert txn.entry("a") == {"t": "f", "id": 1}
    finally:
        _in_thread(journal.close)
