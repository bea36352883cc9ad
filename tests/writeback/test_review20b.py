"""Review of nodeloss20 (the shared log and journal adoption): a holder whose lease lapsed
while its write was in flight acknowledged it after another node had adopted its journal.

The rule adoption stands on (docs/writeback.md, "Fencing the old holder"): the lost node
fenced itself before its lease lapsed, so nothing it acknowledges is missing from what the
adopter reads. The fence was checked once, *before* the write's durable steps: a close whose
log record (or chunk, or pack member with its cover record) was slow to land in the shared
tier went on and returned success after the lease had lapsed, after another node had taken
the lease and adopted the journal without it. That close's bytes were then nowhere the
adopter looks, and the old journal's next open is refused (move it aside): an acknowledged
write lost. The slow shared tier is a real one held back for a moment (the write waits on an
event in the writing node, as a stalled NFS server or a paused VM would make it wait); the
clocks (the catalog's, the holder's ``CLOCK_BOOTTIME``) are moved instead of waited for.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from datahub.errors import NotFound, StorageError
from datahub.writeback import lease
from datahub.writeback.adopt import adopt_journal
from tests.writeback.conftest import LAYOUTS
from tests.writeback.test_nodeloss20 import Nodes, _files, _put


class Boot:
    """The holders' ``CLOCK_BOOTTIME`` (``lease.since_boot``), moved by the test."""

    def __init__(self) -> None:
        self.now = lease.since_boot()

    def __call__(self) -> float:
        return self.now


class Gate:
    """Holds the next call of ``fn`` (a write to the shared tier) until ``open``: a shared tier
    that stalls. ``entered`` is set once a call is held."""

    def __init__(self, fn: Callable) -> None:
        self.fn = fn
        self.entered = threading.Event()
        self._open = threading.Event()
        self._held = False

    def __call__(self, *args, **kwargs):
        if not self._held:
            self._held = True
            self.entered.set()
            self._open.wait(60)
        return self.fn(*args, **kwargs)

    def open(self) -> None:
        self._open.set()


def _in_thread(fn: Callable[[], None]) -> tuple[threading.Thread, dict]:
    outcome: dict = {}

    def run() -> None:
        try:
            fn()
            outcome["acknowledged"] = True
        except StorageError as exc:
            outcome["refused"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


@pytest.fixture
def boot(monkeypatch: pytest.MonkeyPatch) -> Boot:
    clock = Boot()
    monkeypatch.setattr(lease, "since_boot", clock)
    return clock


def _until(condition: Callable[[], bool]) -> None:
    """Wait for ``condition`` (another thread's step), at most 30 s."""
    pause = threading.Event()
    for _ in range(3000):
        if condition():
            return
        pause.wait(0.01)
    raise AssertionError("the condition never held")


def _lapse_and_adopt(
    nodes: Nodes, boot: Boot, a, gate: Gate, op: Callable[[], None], ready: Callable[[], bool] = lambda: True
):
    """Run ``op`` on node a until its shared-tier write is held (and ``ready()``: the rest of
    what it does alongside is done); the lease lapses (both clocks move past its ttl), node b
    takes it and adopts a's journal; then the write lands. Returns (b, whether a
    acknowledged ``op``)."""
    thread, outcome = _in_thread(op)
    try:
        assert gate.entered.wait(30), "the write never reached the shared tier"
        _until(ready)
        nodes.clock.now += 60
        boot.now += 60  # node a's own clock too: its fence says lapsed from now on
        b = nodes.open("b")  # takes the lapsed lease
        adopt_journal(b, a.chunks.journal, nodes.stores["b"])
    finally:
        gate.open()
        thread.join(60)
    assert outcome, "the write neither returned nor failed"
    return b, "acknowledged" in outcome


@pytest.fixture
def unpacked(tmp_path: Path) -> Iterator[Nodes]:
    n = Nodes(tmp_path, LAYOUTS["chunk files"])
    yield n
    n.close()


@pytest.fixture(params=list(LAYOUTS))
def both(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Nodes]:
    n = Nodes(tmp_path, LAYOUTS[request.param])
    yield n
    n.close()


def test_an_overwrite_whose_log_record_lands_after_the_lease_lapsed_is_not_acknowledged(
    unpacked: Nodes, boot: Boot
) -> None:
    """The record of an overwrite is slow; meanwhile the lease lapses and node b adopts the
    journal (v1). The close must not then return success: b never saw v2."""
    a = unpacked.open("a")
    b = None
    try:
        _put(a, "ckpt", b"v1")
        shipper = a.journal.shipper
        gate = Gate(shipper._record)
        shipper._record = gate  # the log's thread calls it: the next record waits
        b, acknowledged = _lapse_and_adopt(unpacked, boot, a, gate, lambda: _put(a, "ckpt", b"v2"))
        got = _files(b)["ckpt"]
        assert not acknowledged or got == b"v2", (
            f"node a acknowledged v2 after its lease lapsed; the adopter has {got!r}: lost"
        )
    finally:
        a.abandon()
        if b is not None:
            b.close()


def test_a_rename_whose_log_record_lands_after_the_lease_lapsed_is_not_acknowledged(
    unpacked: Nodes, boot: Boot
) -> None:
    a = unpacked.open("a")
    b = None
    try:
        _put(a, "tmp", b"output")
        shipper = a.journal.shipper
        gate = Gate(shipper._record)
        shipper._record = gate
        b, acknowledged = _lapse_and_adopt(unpacked, boot, a, gate, lambda: a.rename("tmp", "final"))
        got = sorted(_files(b))
        assert not acknowledged or got == ["final"], (
            f"node a acknowledged the rename after its lease lapsed; the adopter has {got}"
        )
    finally:
        a.abandon()
        if b is not None:
            b.close()


def _recorded(ws, path: str) -> bool:
    """Whether the journal of ``ws`` names ``path``'s chunk (its commit ran: logged, or deferred)."""
    try:
        return bool(ws.journal_record(path).get("chunks"))
    except NotFound:
        return False


@pytest.mark.parametrize("staged", [False, True], ids=["plain", "staged"])
def test_a_new_files_close_whose_chunk_lands_after_the_lease_lapsed_is_not_acknowledged(
    both: Nodes, boot: Boot, staged: bool
) -> None:
    """A new file's first close: its journal commit (a logged record naming the chunk
    unverified, or a deferred commit whose cover record goes with the chunk into its pack)
    runs beside the chunk's write, and the close returns once both are durable. The chunk's
    write is slow; the lease lapses and node b adopts (the chunk is not there: b leaves the
    file out, as a first close that never returned). The close must not then succeed. The
    same through a staged file (``open(staged=True)``: what a mount's writes use), whose small
    first close has its own overlapped commit (``StagedFile._commit_small``)."""
    a = both.open("a")
    b = None

    def put_new() -> None:
        if not staged:
            _put(a, "new", b"fresh")
            return
        with a.open("new", create=True, truncate=True, staged=True) as fh:
            fh.write(0, b"fresh")

    try:
        _put(a, "before", b"acknowledged before")
        gate = Gate(a.chunks.write)
        a.chunks.write = gate  # the next chunk (and its cover record, in a pack) waits
        b, acknowledged = _lapse_and_adopt(both, boot, a, gate, put_new, lambda: _recorded(a, "new"))
        got = _files(b)
        assert got.get("before") == b"acknowledged before"
        assert not acknowledged or got.get("new") == b"fresh", (
            f"node a acknowledged 'new' after its lease lapsed; the adopter has {sorted(got)}: lost"
        )
    finally:
        a.abandon()
        if b is not None:
            b.close()
