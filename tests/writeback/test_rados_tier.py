"""A workspace whose shared tier is a Ceph RADOS pool (``rados://``): the write-back promises
hold there as on a local directory — close returns once the bytes are in the pool and the
record is journaled, a crash loses no acknowledged file, reads and flushes give the exact
bytes — through both ways a file's bytes reach the pool: a buffered file's chunks
(``ChunkStore.write``) and a staged file's ranges (``ChunkStore.copy_in``, read from the
staged file with one ``pread`` per chunk).

The session's Ceph cluster (scripts/ceph-dev, ``DATAHUB_TEST_CEPH_ENV`` to reuse one).
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from datahub.writeback.chunks import RangeReader
from datahub.writeback.packs import cover_seed, decode_cover
from tests.writeback.conftest import CHUNK, Env, make_env, write
from tests.writeback.crash_worker import small_bytes
from tests.writeback.test_cover import _another_boot, _in_journal, _journal_dir
from tests.writeback.test_crash import recover_and_check, run_until, spec_for

pytestmark = pytest.mark.ceph

SIZES = [0, 100, CHUNK, 3 * CHUNK + 5]
MiB = 1024**2


@pytest.fixture
def rados_env(tmp_path: Path, ceph_cluster, monkeypatch) -> Iterator[Env]:
    """A workspace environment with its shared tier under a fresh prefix of the test pool."""
    monkeypatch.syspath_prepend(ceph_cluster.vars["CEPH_PYLIB"])  # Debian's python3-rados
    monkeypatch.setenv("CEPH_CONF", ceph_cluster.vars["CEPH_CONF"])
    pool, prefix = ceph_cluster.vars["CEPH_POOL"], f"wb-{uuid.uuid4().hex[:12]}"
    env = make_env(tmp_path, shared_url=f"rados://{pool}/{prefix}")
    yield env
    shared = env.stores.store(env.config.resolved_shared_url)
    for info in list(shared.list()):
        shared.delete(info.key)
    env.close()


def read_back(ws, path: str) -> bytes:
    with ws.open(path) as fh:
        return fh.read(0, 1 << 30)


@pytest.mark.parametrize("staged", [False, True], ids=["buffered", "staged"])
def test_closed_files_are_in_the_pool_and_survive_a_crash(rados_env: Env, staged: bool) -> None:
    ws = rados_env.open()
    ws.mkdir("d")
    files = {f"d/f{size}": os.urandom(size) for size in SIZES}
    for path, data in files.items():
        with ws.open(path, create=True, truncate=True, staged=staged) as fh:
            if staged:
                assert fh.staged_fd >= 0
                os.pwrite(fh.staged_fd, data, 0)
            else:
                fh.write(0, data)
    chunks = {key for path in files for key, _ in ws.journal_record(path)["chunks"].values()}
    assert len(chunks) == sum(-(-len(d) // CHUNK) for d in files.values())
    assert chunks <= set(rados_env.shared_keys())  # each chunk is an object of the pool
    ws = rados_env.crash_and_reopen(ws)  # acknowledged: kept, and nothing else
    for path, data in files.items():
        assert read_back(ws, path) == data
    assert set(rados_env.shared_keys()) == chunks  # recovery deleted nothing referenced
    ws.flush()
    assert rados_env.origin_files() == {p: hashlib.sha256(d).hexdigest() for p, d in files.items()}


def test_a_staged_file_rewritten_after_its_fsync_keeps_the_acknowledged_bytes(rados_env: Env) -> None:
    """The staged file is never the acknowledged object: chunks copied at the fsync stay."""
    ws = rados_env.open()
    first = os.urandom(2 * CHUNK + 7)
    fh = ws.open("f", create=True, truncate=True, staged=True)
    os.pwrite(fh.staged_fd, first, 0)
    fh.fsync()
    os.pwrite(fh.staged_fd, os.urandom(CHUNK), CHUNK // 2)  # unacknowledged, in place
    ws = rados_env.crash_and_reopen(ws)
    assert read_back(ws, "f") == first


def test_four_writers_get_their_own_bytes(rados_env: Env) -> None:
    """Concurrent closes (the upload pool and every writer thread on their own I/O context)."""
    ws = rados_env.open()
    files = {f"f{i}": os.urandom(1000 + 997 * i) for i in range(24)}

    def one(item: tuple[str, bytes]) -> None:
        path, data = item
        if len(data) % 2:
            write(ws, path, data)
        else:
            with ws.open(path, create=True, truncate=True, staged=True) as fh:
                os.pwrite(fh.staged_fd, data, 0)

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(one, files.items()))
    ws = rados_env.crash_and_reopen(ws)
    for path, data in files.items():
        assert read_back(ws, path) == data


def test_replaced_and_unlinked_files_leave_no_objects_behind(rados_env: Env) -> None:
    ws = rados_env.open()
    write(ws, "a", os.urandom(3 * CHUNK))
    old = {key for key, _ in ws.journal_record("a")["chunks"].values()}
    write(ws, "a", os.urandom(2 * CHUNK))
    write(ws, "b", os.urandom(CHUNK))
    ws.unlink("b")
    ws.flush()  # garbage is collected after the commits that dropped it
    now = {key for key, _ in ws.journal_record("a")["chunks"].values()}
    assert set(rados_env.shared_keys()) == now and not old & now


def test_a_first_close_a_power_loss_took_from_the_journal_is_written_again_from_its_chunk(
    rados_env: Env, tmp_path: Path
) -> None:
    """A new small file's first commit on RADOS is covered: its record rides in the chunk's
    write op (an xattr), so the journal commit flushes no meta page; after a power loss undid
    that transaction, recovery writes the file again from the record, exactly."""
    ws = rados_env.open()
    write(ws, "keep", b"k" * 300)
    ws.mkdir("d")
    before = tmp_path / "journal-before"
    before.mkdir()
    ws.journal._env.copy(str(before))  # the journal on disk before the next transaction
    payload = os.urandom(3000)  # one chunk (CHUNK is 4096): a covered first commit
    write(ws, "d/new", payload)  # acknowledged: its close returned
    ((key, _),) = ws.journal_record("d/new")["chunks"].values()
    assert decode_cover(ws.chunks._records.record(key), seed=cover_seed(ws.chunks.journal))["path"] == "d/new"
    ws.abandon()
    _another_boot(_journal_dir(rados_env), before / "data.mdb")
    assert not _in_journal(_journal_dir(rados_env), "d/new")  # the power loss took it
    ws = rados_env.open()
    assert read_back(ws, "d/new") == payload and read_back(ws, "keep") == b"k" * 300
    ws.rename("d/new", "d/moved")  # a later commit fences the record: no resurrection
    ws.abandon()
    _another_boot(_journal_dir(rados_env))
    ws = rados_env.open()
    assert [name for name, _ in ws.listdir("d")] == ["moved"]
    assert read_back(ws, "d/moved") == payload


@pytest.fixture
def rados_worker_env(rados_env: Env, ceph_cluster, monkeypatch) -> Env:
    """``rados_env`` for a writer in a subprocess (test_crash.py's worker): it finds python3-rados."""
    monkeypatch.setenv("PYTHONPATH", ceph_cluster.vars["CEPH_PYLIB"])
    return rados_env


@pytest.mark.parametrize(("mode", "size"), [("write", 3 * MiB + 17), ("staged", MiB + 5)])
def test_sigkill_mid_write_keeps_every_acknowledged_file(rados_worker_env: Env, mode: str, size: int) -> None:
    """Buffered and staged writers killed with files acknowledged, one never closed, and one
    written on in place after its fsync: every acknowledged file, exactly, and nothing else."""
    acked = run_until(spec_for(rados_worker_env, mode, files=3, size=size), "WRITING")
    assert len(acked) == 4
    recover_and_check(rados_worker_env, acked)


@pytest.mark.parametrize(
    ("block", "markers"),
    [("put", {"OLD-BLOCKED", "JOURNALED"}), ("journal", {"OLD-BLOCKED", "STORED", "JOURNAL-BLOCKED"})],
)
def test_sigkill_between_the_overlapped_steps_of_a_first_close(
    rados_worker_env: Env, block: str, markers: set[str]
) -> None:
    """Killed with a first close's record journaled and its chunk never written, or its chunk
    written and its record never committed: the file is dropped, everything acknowledged kept."""
    acked = run_until(spec_for(rados_worker_env, "overlap", files=1, size=100_000, block=block), markers)
    recover_and_check(rados_worker_env, acked)


def test_sigkill_among_four_writers_of_small_files_loses_no_acknowledged_one(rados_worker_env: Env) -> None:
    """Covered first commits on RADOS, killed at any moment among four writers: every file
    whose close returned is there whole; one whose close had not returned, whole or absent."""
    acked = run_until(spec_for(rados_worker_env, "small", files=0, size=100_000), "MANY")
    assert len(acked) >= 40
    ws = rados_worker_env.open()
    for path, _ in ws.listdir(""):
        expected = small_bytes(path, 100_000)
        assert read_back(ws, path) == expected, path
        assert path not in acked or hashlib.sha256(expected).hexdigest() == acked[path], path
    assert set(acked) <= {path for path, _ in ws.listdir("")}
    with ws.journal.read() as txn:
        assert not [rec for _, rec in txn.files() if rec.get("unverified")]


def test_a_staged_range_is_read_whole_or_in_pieces_and_a_cut_reads_as_zeros(tmp_path: Path) -> None:
    """``RangeReader``, what a non-local store's put reads a staged chunk from: ``read()``
    (RADOS) and ``read(n)`` (S3) give the range's bytes, each in one ``pread``; a source cut
    short meanwhile reads as zeros to the declared end (the object keeps its size)."""
    data = os.urandom(10_000)
    fd = os.open(tmp_path, os.O_TMPFILE | os.O_RDWR)
    try:
        os.pwrite(fd, data, 0)
        assert RangeReader(fd, 100, 5000).read() == data[100:5100]
        pieces = RangeReader(fd, 100, 5000)
        assert [pieces.read(3000), pieces.read(3000), pieces.read(3000)] == [
            data[100:3100],
            data[3100:5100],
            b"",
        ]
        os.ftruncate(fd, 6000)
        assert RangeReader(fd, 5000, 3000).read() == data[5000:6000] + bytes(2000)
        assert RangeReader(fd, 5000, 3000).readall() == data[5000:6000] + bytes(2000)
    finally:
        os.close(fd)
