"""flushmem19 (issues 38/41): a flush plans a batch at a time and holds a window of uploads.

Before, the flusher read its whole plan in one read transaction (one tuple and record per
dirty file), submitted a future per file at once and listed every pending delete: 0.6 GB
of objects for a flush of 10^6 small files (docs/benchmarks.md, "flushmem19"). Now it reads
the namespace a batch per read transaction, in key order, keeps a window of uploads in
flight, and plans the deletes after the uploads a batch at a time. These tests shrink the
batches to 4 files so that every step crosses batches, and check what the flush promises
(docs/writeback.md, "The flusher") across them: every acknowledged file reaches the origin,
renames and deletes follow, an evicted file's only copy is never overwritten nor deleted,
and a flush cut short (a failed upload, then a crash) loses nothing. Real local stores and
journals.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest

from datahub.errors import StorageError
from datahub.writeback import flusher as flusher_mod
from datahub.writeback.journal import Txn
from tests.writeback.conftest import CHUNK, Env, make_env, write

BATCH = 4
THREADS = 2  # upload threads: the window of uploads in flight is 4 per thread


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def small(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Env]:
    """Batches of 4 files, 2 upload threads, a shared tier of 64 chunks (eviction tests)."""
    monkeypatch.setattr(flusher_mod, "_PLAN_BATCH", BATCH)
    monkeypatch.setattr(flusher_mod, "_SCAN_BATCH", BATCH)
    monkeypatch.setattr(flusher_mod, "_EVICT_BATCH", 2)
    env = make_env(tmp_path, origin_max_concurrency=THREADS, shared_bytes=64 * CHUNK)
    yield env
    env.close()


def _files(n: int, prefix: str = "d") -> dict[str, bytes]:
    return {f"{prefix}{i // 10}/f{i:03d}": f"file {i} of {prefix}".encode() for i in range(n)}


def _write_all(ws, files: dict[str, bytes]) -> None:
    for directory in sorted({p.rpartition("/")[0] for p in files}):
        if directory:
            ws.mkdir(directory)
    for path, data in files.items():
        write(ws, path, data)


class _Reads:
    """The most file records any one read transaction of the workspace's journal read."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, ws) -> None:
        self.most = 0
        real_read, real_file = ws.journal.read, Txn.file
        counts: dict[int, int] = {}

        def file(txn: Txn, file_id: int):
            counts[id(txn)] = counts.get(id(txn), 0) + 1
            return real_file(txn, file_id)

        @contextmanager
        def read():
            with real_read() as txn:
                counts[id(txn)] = 0
                try:
                    yield txn
                finally:
                    self.most = max(self.most, counts.pop(id(txn)))

        monkeypatch.setattr(Txn, "file", file)
        monkeypatch.setattr(ws.journal, "read", read)


class _Held(ThreadPoolExecutor):
    """An upload pool that counts the uploads the flusher submitted and has not taken back
    (``result()``) at each submit: what it holds in flight, whatever the threads' speed."""

    most = 0

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._out: set[int] = set()

    def submit(self, fn, /, *args, **kwargs):
        future = super().submit(fn, *args, **kwargs)
        out, key = self._out, id(future)
        out.add(key)
        _Held.most = max(_Held.most, len(out))

        class Taken:
            def result(self, timeout=None):
                out.discard(key)
                return future.result(timeout)

        return Taken()


def test_a_flush_holds_a_batch_of_files_and_a_window_of_uploads(
    small: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """60 new files: every read transaction of the flush reads at most a batch of records, and
    at most 4 uploads per thread are in flight at once (before: one transaction read all 60
    records and the 60 uploads were all submitted before the first was taken back)."""
    ws = small.open(background=False)
    files = _files(60)
    _write_all(ws, files)
    reads = _Reads(monkeypatch, ws)
    monkeypatch.setattr(flusher_mod, "ThreadPoolExecutor", _Held)
    _Held.most = 0
    report = ws.flush()
    assert (report.uploaded, report.still_dirty, report.errors) == (60, 0, [])
    assert small.origin_files() == {p: sha(d) for p, d in files.items()}
    assert reads.most <= 2 * BATCH, reads.most  # a record per file and one per evicted-copy check
    assert 0 < _Held.most <= 4 * THREADS + 1, _Held.most
    assert ws.dirty() == []


def test_renames_and_deletes_across_batches(small: Env) -> None:
    """A renamed directory of 20 files and 7 unlinked files, flushed in batches of 4: the new
    paths are uploaded, the old ones deleted after the uploads, every one in one flush."""
    ws = small.open(background=False)
    files = _files(30)
    _write_all(ws, files)
    ws.flush()
    ws.rename("d1", "e1")
    ws.rename("d2", "a2")  # before the others in namespace order
    gone = [f"d0/f{i:03d}" for i in range(7)]
    for path in gone:
        ws.unlink(path)
    assert len(ws.dirty()) == 20 + 20 + 7
    report = ws.flush()
    assert (report.uploaded, report.deleted, report.still_dirty) == (20, 27, 0)
    want = {p.replace("d1/", "e1/").replace("d2/", "a2/"): sha(d) for p, d in files.items() if p not in gone}
    assert small.origin_files() == want
    assert ws.dirty() == [] and ws.stats()["pending_deletes"] == 0


def _evicted(small: Env, ws, files: dict[str, bytes]) -> list[str]:
    """Write and flush ``files``, then evict them all: their bytes live in the origin alone."""
    _write_all(ws, files)
    ws.flush()
    ws.flusher.evict(0)
    evicted = [p for p in files if not ws.journal_record(p)["chunks"]]
    assert sorted(evicted) == sorted(files)
    return evicted


def test_an_evicted_files_only_copy_waits_for_its_move_across_batches(small: Env) -> None:
    """Evicted files renamed, and new files written at their old paths, earlier in the
    namespace than the files' new paths: the new files wait until the evicted ones were
    uploaded under their new names, then go in the same flush, and both read back right."""
    ws = small.open(background=False)
    old = _files(8, prefix="m")
    _evicted(small, ws, old)
    ws.mkdir("z")
    for path in old:  # m0/f000 -> z/m0-f000, and a new file at m0/f000
        ws.rename(path, "z/" + path.replace("/", "-"))
    new = {path: b"new bytes at " + path.encode() for path in old}
    for path, data in new.items():
        write(ws, path, data)
    report = ws.flush()
    assert (report.uploaded, report.still_dirty, report.errors) == (16, 0, [])
    want = {p: sha(d) for p, d in new.items()} | {"z/" + p.replace("/", "-"): sha(d) for p, d in old.items()}
    assert small.origin_files() == want
    for path, data in old.items():
        with ws.open("z/" + path.replace("/", "-")) as fh:
            assert fh.read(0, 100) == data


def test_an_evicted_file_renamed_during_the_flush_keeps_its_only_copy(small: Env) -> None:
    """The flush has read its first batches when an evicted file is renamed to a path it has
    passed, and a new file is written at the old path, which it reaches later: that new file
    is not uploaded over the evicted file's only copy (a plan of the whole namespace at the
    start would not know of the rename). The next flush moves the file, then uploads it."""
    ws = small.open(background=False)
    _evicted(small, ws, {"m/evicted": b"the only copy"})
    early = {f"a{i:02d}": f"early {i}".encode() for i in range(40)}  # before "m/..." in namespace order
    for path, data in early.items():
        write(ws, path, data)
    real = flusher_mod.Flusher._upload
    done: list[str] = []
    once = threading.Lock()

    def upload(flusher, path, file_id, rec, progress):
        out = real(flusher, path, file_id, rec, progress)
        # The first upload to end: no upload was taken back yet, so the flush has submitted at
        # most a window of them and read at most a batch more: it is among the root's files,
        # past "a-moved" (which sorts before "a00") and before "m/evicted".
        if once.acquire(blocking=False):
            done.append(path)
            ws.rename("m/evicted", "a-moved")
            write(ws, "m/evicted", b"a new file at the old path")
        return out

    flusher_mod.Flusher._upload = upload
    try:
        report = ws.flush()
    finally:
        flusher_mod.Flusher._upload = real
    assert done and report.errors == []
    assert small.origin_files()["m/evicted"] == sha(b"the only copy")
    report = ws.flush()
    assert report.errors == [] and report.still_dirty == 0 and ws.dirty() == []
    files = small.origin_files()
    assert files["a-moved"] == sha(b"the only copy") and files["m/evicted"] == sha(
        b"a new file at the old path"
    )
    with ws.open("a-moved") as fh:
        assert fh.read(0, 100) == b"the only copy"


def test_a_flush_cut_short_then_a_crash_loses_nothing(small: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """The 15th upload of 40 fails: the batches recorded before stay recorded, no delete runs
    (an upload failed), and after a crash the next flush uploads the rest once: the origin
    then holds every file and nothing of the deleted ones."""
    ws = small.open(background=False)
    files = _files(40)
    _write_all(ws, files)
    write(ws, "old", b"to be deleted")
    ws.flush()
    ws.unlink("old")
    for path in list(files)[::2]:
        files[path] = b"rewritten " + path.encode()
        write(ws, path, files[path])
    origin = ws.flusher.origin
    real_put, puts = origin.put, []

    def put(key, data, size=None):
        puts.append(key)
        if len(puts) == 15:
            raise StorageError(f"injected failure of the upload of {key}")
        return real_put(key, data, size=size)

    monkeypatch.setattr(origin, "put", put)
    with pytest.raises(StorageError):
        ws.flush()
    assert "old" in small.origin_files()  # no delete after a failed upload
    dirty = ws.dirty()
    assert 1 <= len(dirty) < 21 and "old" in dirty
    monkeypatch.setattr(origin, "put", real_put)
    ws = small.crash_and_reopen(ws, background=False)
    report = ws.flush()
    assert report.errors == [] and report.deleted == 1 and report.uploaded == len(dirty) - 1
    assert small.origin_files() == {p: sha(d) for p, d in files.items()}
    assert ws.dirty() == []


def test_eviction_takes_the_oldest_files_in_rounds(small: Env) -> None:
    """Eviction picks 2 files a round (the oldest of the namespace), round after round, until
    the shared tier is under its target: the oldest files go, the newest stay."""
    now = [1000.0]
    ws = small.open(background=False, clock=lambda: now[0])
    files = {f"f{i}": bytes([i]) * CHUNK for i in range(8)}  # f0 the oldest
    for path, data in files.items():
        now[0] += 10
        write(ws, path, data)
    ws.flush()
    assert ws.flusher.used == 8 * CHUNK
    freed = ws.flusher.evict(3 * CHUNK)
    assert freed == 5 * CHUNK and ws.flusher.used == 3 * CHUNK
    evicted = sorted(p for p in files if not ws.journal_record(p)["chunks"])
    assert evicted == ["f0", "f1", "f2", "f3", "f4"]
    for path, data in files.items():
        with ws.open(path) as fh:
            assert fh.read(0, CHUNK) == data


def test_a_progress_sink_gets_the_total_before_the_uploads(small: Env) -> None:
    """A sink with ``total`` left at None (`datahub cache flush`'s bar) is told how many files
    and deletes the flush will do before its first upload, counted across batches."""
    ws = small.open(background=False)
    files = _files(14)
    _write_all(ws, files)
    ws.flush()
    for path in list(files)[:5]:
        ws.unlink(path)
    for path in list(files)[5:11]:
        write(ws, path, b"again " + path.encode())

    class Sink:
        total = None
        done = 0
        seen_at_first_update: int | None = None

        def update(self, n: int = 1, nbytes: int = 0) -> None:
            if self.seen_at_first_update is None:
                self.seen_at_first_update = self.total
            self.done += n

    sink = Sink()
    report = ws.flush(progress=sink)
    assert (report.uploaded, report.deleted) == (6, 5)
    assert sink.seen_at_first_update == 11 and sink.total == 11 and sink.done == 11
