"""review18d: smallwrites18's committer wake-up (``Journal._committer_go``, a SimpleQueue).

Held: submitters and group-commit callers racing from several threads, each submitted
request waited on at once (every small file's close through a mount), all return and every
record is in the journal when it is opened again: no wake-up of the committer is lost
between a lead given up and a request queued meanwhile.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from datahub.writeback.journal import Journal

THREADS, EACH = 6, 30


def test_racing_submits_and_applies_all_commit_and_none_waits_for_ever(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "lmdb", "workspace 'review18d'")
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(EACH):
                entry = {"t": "f", "id": n * 1000 + i}
                if i % 3:
                    request = journal.submit(
                        f"create of 'f{n}-{i}'", lambda txn, p=f"f{n}-{i}", e=entry: txn.put_entry(p, e)
                    )
                    request.wait()
                else:
                    journal.apply(
                        f"create of 'f{n}-{i}'", lambda txn, p=f"f{n}-{i}", e=entry: txn.put_entry(p, e)
                    )
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,), daemon=True) for n in range(THREADS)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 20  # a hang's limit, not a timing: a commit takes milliseconds
    try:
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        assert not any(t.is_alive() for t in threads), "a request was never committed (a lost wake-up)"
        assert errors == []
    finally:
        journal.close()  # its committer thread's last wake-up: it leads what is queued and ends
    again = Journal(tmp_path / "lmdb", "workspace 'review18d'")
    try:
        with again.read() as txn:
            for n in range(THREADS):
                for i in range(EACH):
                    assert txn.entry(f"f{n}-{i}") == {"t": "f", "id": n * 1000 + i}
    finally:
        again.close()


def test_a_request_handed_to_the_committer_as_the_journal_closes_is_committed(tmp_path: Path) -> None:
    """review18d's finding: the committer passed the lead to a request submitted during its
    batch (``_hand_to_committer``: the journal still open), then saw the journal closed and
    returned; that request's ``wait()`` never returned. The interleaving is forced: the batch
    submits the second request, and ``close()``'s first step (``_closed``) lands between the
    hand-off and the committer's check."""
    journal = Journal(tmp_path / "lmdb", "workspace 'review18d'")
    second: list = []
    hand = journal._hand_to_committer

    def hand_then_close_begins() -> bool:
        handed = hand()
        if threading.current_thread() is journal._committer:
            journal._closed = True  # close() has begun on another thread
        return handed

    journal._hand_to_committer = hand_then_close_begins

    def first(txn):
        txn.put_entry("a", {"t": "f", "id": 1})
        second.append(journal.submit("create of 'b'", lambda t: t.put_entry("b", {"t": "f", "id": 2})))

    journal.submit("create of 'a'", first).wait()
    waiter = threading.Thread(target=second[0].wait, daemon=True)
    waiter.start()
    waiter.join(20)  # a hang's limit, not a timing
    try:
        assert not waiter.is_alive(), "the request handed over as the journal closed was never committed"
    finally:
        journal._closed = False
        journal.close()
