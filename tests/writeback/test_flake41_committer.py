"""flake41: the journal's committer wrote a covered close's deferred commit at once.

The committer decides that the deferred commits are due, then writes them. It wrote the
list of the moment it wrote, not the one it had decided on: stalled between the two (a
loaded machine: ``test_ceph41_rgw_cover``'s power-loss test failed once in a fresh clone
and 1 run of 21 beside CPU hogs, ``deferred() == 0``), it resumed after another transaction
had written the due commits and a new close had deferred its own, and wrote that one
``defer_seconds`` early: a journal transaction and a shared-log record the close was covered
to save. Here the stall is made on purpose: the committer is held after its decision.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.writeback.conftest import Env, make_env, write


@pytest.fixture
def packs_env(tmp_path: Path) -> Iterator[Env]:
    env = make_env(tmp_path)  # packs: covered first commits, deferred
    yield env
    env.close()


def test_a_committer_stalled_after_its_decision_writes_only_the_commits_it_found_due(
    packs_env: Env,
) -> None:
    ws = packs_env.open()
    journal = ws.journal
    decided, go, done = threading.Event(), threading.Event(), threading.Event()
    settle = journal.settle_deferred

    def stalled(*args: object, **kwargs: object) -> None:
        """The committer's first write of due commits, held until the test lets it go."""
        if threading.current_thread().name.startswith("journal-") and not decided.is_set():
            decided.set()
            go.wait(30)
            try:
                return settle(*args, **kwargs)
            finally:
                done.set()
        return settle(*args, **kwargs)

    journal.settle_deferred = stalled  # type: ignore[method-assign]
    write(ws, "keep", b"k" * 300)  # covered, deferred: due 100 ms later
    assert decided.wait(30)  # the committer found it due, and stalls there
    ws.mkdir("d")  # a transaction: it writes the deferred commit first
    assert journal.deferred() == 0
    journal.defer_seconds = 3600.0
    write(ws, "d/new", b"n" * 3000)  # covered, deferred: due in an hour
    assert journal.deferred() == 1
    go.set()
    assert done.wait(30)  # the committer resumed and wrote what it had found due
    assert journal.deferred() == 1  # not the close that came after its decision
    with ws.open("d/new") as fh:
        assert fh.read(0, 1 << 20) == b"n" * 3000
