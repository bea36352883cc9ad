"""newuser20: a workspace mount whose writer lease is lost warns once, then reminds now and then.

The committer retries writing the deferred commits while the fence refuses them (a lost
lease refuses every try until unmount). A warning at each try (one a second) flooded the
mount's log and buried the first, which says what happened (review19c).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.errors import StorageError
from datahub.writeback.failure_log import FailureLog
from datahub.writeback.journal import Journal


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.recovered = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        if "written into the journal now" in record.getMessage():
            self.recovered.set()

    def warnings(self) -> list[str]:
        return [r.getMessage() for r in self.records if r.levelno >= logging.WARNING]


@pytest.fixture
def logged() -> Iterator[Collect]:
    handler = Collect()
    logger = logging.getLogger("datahub.writeback")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def test_a_journal_whose_lease_is_lost_warns_once_then_says_when_it_recovers(
    tmp_path: Path, logged: Collect
) -> None:
    journal = Journal(tmp_path / "lmdb", "a journal")
    try:
        journal.defer_seconds = 0.001
        journal.retry_seconds = 0.001  # the committer's pause after a failed try (1 s)
        journal.start_covers(1 << 32)
        refused = threading.Semaphore(0)
        tries = 0

        def lost(doing: str) -> None:  # the lease is lost just after the close was recorded
            nonlocal tries
            if "deferred commits" in doing:
                tries += 1
                if tries > 20:
                    return  # the lease is back (another holder let go): written at this try
                refused.release()
                raise StorageError(f"{doing} refused: this process no longer holds the writer lease")

        journal.fence = lost
        request = journal.submit(
            "fsync of 'y'", lambda txn: txn.put_entry("y", {"t": "f", "id": 8}), covered=True
        )
        assert request.wait() is None and request.cover
        for _ in range(20):  # twenty refused writes of the deferred commit
            assert refused.acquire(timeout=60)
        assert logged.recovered.wait(timeout=60)  # the 21st try wrote it
    finally:
        journal.close()
    warnings = logged.warnings()
    assert len([w for w in warnings if "refused" in w]) == 1, warnings
    assert len([r for r in logged.records if "refused" in r.getMessage()]) >= 20  # the rest: debug
    assert any("written into the journal now" in w and "20 failed tries" in w for w in warnings), warnings


def test_a_failure_that_goes_on_is_said_again_after_the_reminder_interval(logged: Collect) -> None:
    now = [100.0]
    failures = FailureLog(logging.getLogger("datahub.writeback.test"), "ws", remind=600, clock=lambda: now[0])
    for _ in range(600):  # a try a second for ten minutes: the first warning only
        failures.failed("refused: lease lost")
        now[0] += 1
    assert logged.warnings() == ["ws: refused: lease lost"]
    failures.failed("refused: lease lost")  # ten minutes on
    assert len(logged.warnings()) == 2
    assert "still failing, 601 tries in 600 s" in logged.warnings()[1]
    failures.succeeded("flushed")
    assert "ws: flushed (after 601 failed tries" in logged.warnings()[2]
    failures.succeeded("flushed")  # not failing: nothing more said
    failures.failed("again")  # a new run starts with a warning
    assert len(logged.warnings()) == 4 and logged.warnings()[3] == "ws: again"
