"""gclock15: a commit beside a writer rewriting a file it keeps open, and a looping flusher.

Each fsync of the writer leaves the old chunks as garbage the flusher may not delete while
the file is open. Before the fix that garbage stayed on the journal's list, which every
flush read whole again (ever longer as the writer went on), and the collection ran after
the flush recorded what the origin holds, inside the window where a commit needs the file
unchanged: review14wb's race test hung past the suite's 300 s timeout on a loaded machine
until it was paced. The first test is that race unpaced (on a quieter machine it passed
before the fix too); the next two fail before the fix whatever the load; the last checks
the order in which the flusher's turn is granted (a plain lock before)."""

from __future__ import annotations

import hashlib
import threading
import time

import pytest

from datahub.errors import Conflict, ObjectChanged
from datahub.workspaces import commit_workspace
from datahub.writeback.flusher import _UNLIST, _Turns
from tests.writeback.conftest import CHUNK, Env, objects_of
from tests.writeback.test_review14wb import SIZE, _generation, flush_until

HANG_GUARD = 60.0  # seconds: only a guard against a hang, never a measure of speed
FLUSHERS = 3  # threads flushing in a loop (the background flusher, `datahub cache flush`s)


def test_a_commit_finishes_while_a_writer_rewrites_and_flushers_loop_unpaced(env: Env, catalog) -> None:
    """Neither the rewriter nor the flushers looping beside it take a breath. The commit
    (retried on the documented Conflict while the file keeps changing) must finish while
    the rewriter is still going, and the version must hold one whole generation an fsync
    acknowledged."""
    ws = env.open()
    with ws.open("ckpt", create=True) as fh:
        fh.write(0, _generation(0))
    begun = {hashlib.sha256(_generation(0)).hexdigest(): 0}
    fsynced = [0]  # generations the rewriter has fsynced
    stop = threading.Event()
    errors: list[BaseException] = []

    def rewrite() -> None:
        try:
            with ws.open("ckpt") as fh:
                n = 0
                while not stop.is_set():
                    n += 1
                    data = _generation(n)
                    for offset in range(0, SIZE, CHUNK):
                        fh.write(offset, data[offset : offset + CHUNK])
                    begun[hashlib.sha256(data).hexdigest()] = n
                    fh.fsync()
                    fsynced[0] = n
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    versions: list = []

    def commit() -> None:
        try:
            while not stop.is_set():
                try:
                    versions.append(commit_workspace(ws, catalog, "race"))
                    return
                except (Conflict, ObjectChanged):
                    continue  # the file changed between the flush and the commit: again
        except BaseException as exc:
            errors.append(exc)

    workers = [
        threading.Thread(target=rewrite),
        *(threading.Thread(target=flush_until, args=(ws, stop, errors)) for _ in range(FLUSHERS)),
    ]
    for t in workers:
        t.start()
    committer = threading.Thread(target=commit)
    try:
        while fsynced[0] < 3 and not errors:  # the race is on: garbage is piling up
            stop.wait(0.01)
        before = fsynced[0]
        committer.start()
        committer.join(HANG_GUARD)
        finished = not committer.is_alive()
        after = fsynced[0]
    finally:
        stop.set()
        for t in workers:
            t.join()
        if committer.ident is not None:
            committer.join()
    assert not errors, errors
    assert finished, f"no commit finished in {HANG_GUARD:.0f} s beside the rewriter and the flusher"
    assert after > before, "the rewriter stopped: the commit did not race it"
    (version,) = versions
    assert [r.key for r in catalog.list_records("race", version.seq)] == ["ckpt"]
    rec = catalog.get_record("race", version.seq, "ckpt")
    store, key = env.stores.for_url(rec.url)
    data = store.read(key, etag=rec.etag)
    digest = hashlib.sha256(data).hexdigest()
    assert rec.checksum == f"sha256:{digest}" and rec.size == len(data) == SIZE
    assert digest in begun, "the version holds bytes no fsync acknowledged (a mix of generations)"


def test_a_commit_holds_although_the_writer_fsyncs_during_every_garbage_collection(env: Env, catalog) -> None:
    """Each time the flusher collects garbage, the writer fsyncs a new generation of the file
    it keeps open (what a rewriter does whenever the collection outlasts one of its rounds:
    the collection read the whole, ever longer garbage list of that open file). Before the
    fix, the commit's flush collected after recording what the origin holds, so that fsync
    fell between the record and the commit's read of it: every attempt met Conflict. Now
    the flush collects first, and the commit holds the generation fsynced before its plan."""
    ws = env.open()
    fh = ws.open("ckpt", create=True)
    fsynced = [0]
    errors: list[BaseException] = []

    def rewrite() -> None:
        try:
            data = _generation(fsynced[0] + 1)
            for offset in range(0, SIZE, CHUNK):
                fh.write(offset, data[offset : offset + CHUNK])
            fh.fsync()
            fsynced[0] += 1
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    rewrite()
    collect = ws.flusher.gc

    def collect_beside_a_rewrite() -> int:
        writer = threading.Thread(target=rewrite)  # the writer's own thread: it holds no flusher turn
        writer.start()
        writer.join()
        return collect()

    ws.flusher.gc = collect_beside_a_rewrite
    try:
        version = None
        for _attempt in range(5):
            try:
                version = commit_workspace(ws, catalog, "c")
                break
            except Conflict:
                continue
    finally:
        ws.flusher.gc = collect
    assert not errors, errors
    assert version is not None, "every commit met Conflict: the writer's fsync fell inside each one"
    rec = catalog.get_record("c", version.seq, "ckpt")
    store, key = env.stores.for_url(rec.url)
    assert store.read(key, etag=rec.etag) == _generation(fsynced[0])
    fh.close()


def _rewritten_while_open(ws, generations: int):
    """``ckpt`` written, then rewritten whole ``generations`` times through one open
    handle (each fsync leaves the old chunks as garbage), and flushed. Returns the handle,
    still open, and the objects that held the old generations' chunks."""
    fh = ws.open("ckpt", create=True)
    old: set[str] = set()
    for n in range(generations + 1):
        old |= _chunk_objects(ws) if n else set()
        data = _generation(n)
        for offset in range(0, SIZE, CHUNK):
            fh.write(offset, data[offset : offset + CHUNK])
        fh.fsync()
    ws.flush()
    return fh, old


def _chunk_objects(ws) -> set[str]:
    return objects_of(ws, {key for key, _ in ws.journal_record("ckpt")["chunks"].values()})


@pytest.mark.parametrize("end", ["close", "crash"])
def test_an_open_files_garbage_is_not_read_again_by_each_flush_and_goes_once_it_closes(
    env: Env, end: str
) -> None:
    """While the file is open its old chunks stay (a handle may be reading one), but they
    leave the journal's garbage list in batches: before, every flush read the whole list
    again, and a rewriter keeping its file open made it longer by every generation. Once the file is
    closed the next flush deletes them; if the process dies first, the next open does."""
    ws = env.open()
    generations = _UNLIST // 4 + 8  # each leaves 4 chunks: more than one batch in all
    fh, old = _rewritten_while_open(ws, generations)
    with ws.journal.read() as txn:
        assert len(txn.garbage()) < _UNLIST, "the open file's garbage is still on the list each flush reads"
    assert old <= set(env.shared_keys()), "an open file's old chunks went while it is open"
    assert fh.read(0, SIZE) == _generation(generations)
    if end == "close":
        fh.close()
        ws.flush()
    else:
        ws = env.crash_and_reopen(ws)
    assert set(env.shared_keys()) == _chunk_objects(ws)
    assert ws.open("ckpt").read(0, SIZE + 1) == _generation(generations)


def test_the_flusher_turn_goes_to_the_waiting_caller_before_its_holder_takes_it_again() -> None:
    """A thread that flushes in a loop asks again right after its turn ends; a caller that
    was already waiting goes first (a plain lock let the looping thread barge in)."""
    turns = _Turns()
    order: list[str] = []

    def flush(name: str) -> None:
        with turns.turn():
            order.append(name)

    with turns.turn():
        waiting = threading.Thread(target=flush, args=("committer",))
        waiting.start()
        while not turns._waiting:  # until the committer has asked (a wait, not a measure)
            time.sleep(0.001)
    flush("looping flusher")
    waiting.join()
    assert order == ["committer", "looping flusher"]
