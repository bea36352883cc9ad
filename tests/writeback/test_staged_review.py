"""Review of staged files' space rule (issue 41, review11): a close or fsync that returns
0 commits exactly what the writers wrote, never a prefix of a write that failed for space.

The staging directory is a real small tmpfs, so the kernel's ENOSPC is real. A writer in
the kernel (a passthrough write) is ``os.pwrite`` on the staged file, as in
tests/writeback/test_staged.py; where the case is a race, the write is made at the moment
between two of the daemon's system calls where a kernel writer can land (no lock of ours
keeps it out), by running it from the daemon's own step.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.errors import NoSpace, NotFound
from datahub.writeback import staged
from datahub.writeback.workspace import STAGING_DIR
from tests.tmpfs import small_tmpfs
from tests.writeback.conftest import Env
from tests.writeback.test_faults import fill, fill_up

KiB, MiB = 1024, 1024**2


def tmpfs_of(tmp_path: Path, size: str):
    """A real tmpfs of ``size`` under ``tmp_path`` (needs root), as a context manager."""
    return small_tmpfs(tmp_path / f"disk-{uuid.uuid4().hex[:6]}", size)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 8 MiB tmpfs."""
    with tmpfs_of(tmp_path, "8m") as mount_point:
        yield mount_point


def staged_on(env: Env, disk: Path):
    """Workspace "ws" whose staged files live on ``disk`` (made before its first staged file)."""
    ws = env.open()
    root = ws.chunks.local_root
    assert root is not None
    (root / STAGING_DIR).mkdir(parents=True, exist_ok=True)
    (root / STAGING_DIR / ws.name).symlink_to(disk)
    return ws


def failing_write(fd: int, data: bytes, offset: int) -> int:
    """A writer's loop of ``write(2)`` that ends in ENOSPC: the bytes it got in (the writer
    saw the write fail)."""
    done = 0
    with pytest.raises(OSError) as exc:
        while done < len(data):
            done += os.pwrite(fd, data[done:], offset + done)
    assert exc.value.errno == errno.ENOSPC
    return done


def committed(env: Env, ws, path: str) -> bytes | None:
    """What a crash leaves of ``path`` (None: nothing committed)."""
    ws = env.crash_and_reopen(ws)
    try:
        with ws.open(path) as fh:
            return fh.read(0, 1 << 30)
    except NotFound:
        return None


def refused_with_a_second_handle(env: Env, disk: Path, monkeypatch, path: str):
    """A staged file on ``disk`` (1 MiB reserved, no watcher) whose fsync acknowledged 200 KiB,
    open in a second handle, then written past its reservation in one call, so its fsync
    is refused: (workspace, first handle, second handle, acknowledged bytes)."""
    monkeypatch.setattr(staged, "STAGE_RESERVE", 1 * MiB)
    ws = staged_on(env, disk)
    fh = ws.open(path, create=True, truncate=True, staged=True)
    of = fh._of
    of._staging.watch.remove(of._wd)  # no growth racing the ballast
    acked = os.urandom(200 * KiB)
    os.pwrite(of.fd, acked, 0)
    fh.fsync()
    other = ws.open(path)  # a second handle of the same file (another process's open)
    assert other._of is of
    os.pwrite(of.fd, b"x" * (2 * MiB), 0)  # one call past the reservation: this close is refused
    with pytest.raises(NoSpace):
        fh.fsync()
    return ws, fh, other, acked


def test_a_write_into_a_growing_truncates_hole_that_failed_for_space_is_never_committed(
    env: Env, small_disk: Path, monkeypatch
) -> None:
    monkeypatch.setattr(staged, "STAGE_RESERVE", 1 * MiB)
    ws = staged_on(env, small_disk)
    fh = ws.open("hole.bin", create=True, truncate=True, staged=True)
    of = fh._of
    assert of.reserved == 1 * MiB
    of._staging.watch.remove(of._wd)  # no growth racing the ballast
    os.pwrite(fh.staged_fd, b"a" * (100 * KiB), 0)
    real = of._reserve_past
    got_in: list[int] = []
    ballasts: list[Path] = []

    def racing(size: int, upto: int) -> None:
        if os.fstat(of.fd).st_size != size:  # a reservation before the ftruncate (writes11's c0c2e24)
            ballasts.append(fill(small_disk, 500 * KiB))  # the disk is full: it gets nothing
        else:  # the ftruncate made the hole [1 MiB, 3 MiB), with no block of it reserved
            if not ballasts:
                ballasts.append(fill(small_disk, 500 * KiB))  # the disk fills meanwhile
            got_in.append(failing_write(of.fd, b"w" * MiB, 1 * MiB))  # the kernel writes the hole
            while ballasts:
                ballasts.pop().unlink()  # another writer frees space: the reservation now succeeds
        real(size, upto)

    monkeypatch.setattr(of, "_reserve_past", racing)
    fh.truncate(3 * MiB)
    monkeypatch.undo()
    assert 0 < got_in[0] < MiB and os.fstat(of.fd).st_size == 3 * MiB  # half done, size unmoved
    try:
        fh.close()
    except NoSpace:
        pass  # refused: the file is reverted (never acknowledged)
    got = committed(env, ws, "hole.bin")
    assert got is None or b"w" not in got, (
        f"a close returned 0 and committed {got.count(b'w'):,} bytes of a write that failed with ENOSPC"
    )


def test_a_failed_write_past_the_reservation_stays_refused_when_space_comes_back(
    env: Env, small_disk: Path, monkeypatch
) -> None:
    """The watcher and the fsync's growth act after space came back: the blocks they give
    must not count for a file that a failed write left at its reservation's end."""
    monkeypatch.setattr(staged, "STAGE_RESERVE", 1 * MiB)
    ws = staged_on(env, small_disk)
    fh = ws.open("past.bin", create=True, truncate=True, staged=True)
    of = fh._of
    os.pwrite(fh.staged_fd, b"a" * (200 * KiB), 0)
    of._staging.watch.remove(of._wd)  # this case is about the rule, not the watcher's timing
    ballast = fill(small_disk, 300 * KiB)
    assert 0 < failing_write(of.fd, b"w" * (2 * MiB), 200 * KiB) < 2 * MiB
    ballast.unlink()
    of.grow()
    of._extend(6 * MiB)
    with pytest.raises(NoSpace):
        fh.fsync()
    with pytest.raises(NoSpace):
        fh.close()
    assert committed(env, ws, "past.bin") is None


def test_a_sparse_write_that_failed_on_its_first_byte_leaves_exactly_what_was_written(
    env: Env, small_disk: Path, monkeypatch
) -> None:
    """A write far past the end that gets no block writes nothing and moves no size: the
    close may commit the file as the writers left it, but never with bytes of that write."""
    monkeypatch.setattr(staged, "STAGE_RESERVE", 1 * MiB)
    ws = staged_on(env, small_disk)
    fh = ws.open("sparse.bin", create=True, truncate=True, staged=True)
    fh._of._staging.watch.remove(fh._of._wd)  # no growth racing the ballast
    data = os.urandom(300 * KiB)
    os.pwrite(fh.staged_fd, data, 0)
    ballasts = [fill(small_disk, 64 * KiB)]
    ballasts.append(fill_up(small_disk))  # to the last block
    with pytest.raises(OSError) as exc:
        os.pwrite(fh.staged_fd, b"w" * (64 * KiB), 5 * MiB)
    assert exc.value.errno == errno.ENOSPC
    for ballast in ballasts:
        ballast.unlink()
    try:
        fh.close()
    except NoSpace:
        pass
    assert committed(env, ws, "sparse.bin") in (None, data)


def test_a_truncate_down_after_a_failed_write_commits_exactly_the_kept_bytes(
    env: Env, small_disk: Path, monkeypatch
) -> None:
    """The writer saw ENOSPC and cut the file back to what it knows was written whole."""
    monkeypatch.setattr(staged, "STAGE_RESERVE", 1 * MiB)
    ws = staged_on(env, small_disk)
    fh = ws.open("cut.bin", create=True, truncate=True, staged=True)
    of = fh._of
    of._staging.watch.remove(of._wd)  # the watcher would grow it before the disk fills
    data = os.urandom(400 * KiB)
    os.pwrite(fh.staged_fd, data, 0)
    ballast = fill(small_disk, 200 * KiB)
    failing_write(fh.staged_fd, b"w" * (3 * MiB), len(data))
    ballast.unlink()
    fh.truncate(len(data))
    fh.close()
    assert committed(env, ws, "cut.bin") == data


def test_a_write_racing_a_reverts_refill_that_failed_for_space_is_never_committed(
    env: Env, small_disk: Path, monkeypatch
) -> None:
    """``StagedFile._restore`` (a close that failed reverts the file, "Out of space at
    close") empties the staged file, reserves, and writes the acknowledged bytes back; it
    checks nothing of a write another handle's writer made into the emptied file before
    the blocks were given, so a later commit takes that write's prefix with it."""
    ws, fh, other, acked = refused_with_a_second_handle(env, small_disk, monkeypatch, "rev.bin")
    of = fh._of
    real = of._reserve_past
    got_in: list[int] = []

    def racing(size: int, upto: int) -> None:
        ballast = fill(small_disk, 400 * KiB)
        got_in.append(failing_write(of.fd, b"w" * MiB, 300 * KiB))  # the other writer, emptied under it
        ballast.unlink()
        real(size, upto)

    monkeypatch.setattr(of, "_reserve_past", racing)
    ws.revert("rev.bin")  # what the mount does after the failed close
    monkeypatch.undo()
    assert 0 < got_in[0] < MiB
    with contextlib.suppress(NoSpace):
        fh.close()
    os.pwrite(of.fd, acked[:10], 0)  # the other writer goes on: a successful write
    try:
        other.close()
    except NoSpace:
        pass
    got = committed(env, ws, "rev.bin")
    # exactly what was acknowledged (``acked`` is random: a count of b"w" alone would meet
    # its own ~800 w bytes), or with the other writer's later 10 bytes, which are acked[:10]
    assert got == acked, (
        f"a close returned 0 and committed {len(got):,} bytes, {got.count(b'w') - acked.count(b'w'):,} "
        "more w bytes than acknowledged (a write that failed with ENOSPC)"
        if got
        else "the acknowledged file was lost"
    )


def test_the_growth_watcher_works_in_a_daemon_with_many_descriptors(unpacked_env: Env, monkeypatch) -> None:
    """A daemon holding 1100 descriptors when its first staged file is made (a busy mount):
    the watcher's inotify descriptor is then past 1023, which ``select.select`` refuses
    (modwatch.py ``_run``): the thread dies and no reservation grows again."""
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1300:
        pytest.skip(f"RLIMIT_NOFILE {soft}")
    monkeypatch.setattr(staged, "STAGE_RESERVE", 1 * MiB)
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        ws = unpacked_env.open()
        fh = ws.open("many.bin", create=True, truncate=True, staged=True)
        of = fh._of
        os.pwrite(of.fd, b"a" * (600 * KiB), 0)  # past a quarter: the watcher grows it
        thread = of._staging.watch._thread
        deadline = time.monotonic() + 30  # a bound only: a dead thread ends the wait at once
        while of.reserved == 1 * MiB and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert of.reserved > 1 * MiB, "the watcher never grew the reservation"
        fh.close()
    finally:
        for fd in held:
            os.close(fd)


def test_stores_through_a_shared_mapping_after_a_growing_truncate_land_in_reserved_blocks(
    env: Env, small_disk: Path, monkeypatch
) -> None:
    """Stores through a mapping make no ``IN_MODIFY`` and cannot be refused by the kernel
    without killing the writer (SIGBUS), so every page a mapping can reach (below the size,
    which only a truncate of ours moves) must already hold its block: after a truncate past
    the reservation the whole new size is reserved, and the close commits the stores."""
    import mmap

    monkeypatch.setattr(staged, "STAGE_RESERVE", 1 * MiB)
    ws = staged_on(env, small_disk)
    fh = ws.open("mapped.bin", create=True, truncate=True, staged=True)
    of = fh._of
    of._staging.watch.remove(of._wd)  # the truncate alone must do it
    fh.truncate(3 * MiB)
    assert of.reserved > 3 * MiB and os.fstat(of.fd).st_blocks * 512 >= 3 * MiB
    ballast = fill(small_disk, 64 * KiB)  # a full disk cannot fail the stores now
    data = os.urandom(3 * MiB)
    other = os.open(f"/proc/self/fd/{of.fd}", os.O_RDWR)  # the kernel's own open of the staged file
    try:
        with mmap.mmap(other, 3 * MiB, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE) as mapping:
            mapping[:] = data
            mapping.flush()
    finally:
        os.close(other)
    ballast.unlink()
    fh.close()
    assert committed(env, ws, "mapped.bin") == data


def test_a_revert_that_finds_no_room_keeps_the_acknowledged_bytes(
    env: Env, small_disk: Path, monkeypatch
) -> None:
    """``StagedFile._restore`` empties the staged file first; when the disk fills between
    that and its reservation (another writer took the freed blocks), it raises NoSpace and
    leaves the staged file empty with no reservation. Once space is back, any truncate of
    ours reserves again, and the next close commits the staged file as it is: an extension
    of the file (ftruncate, then the new tail) commits zeros where the acknowledged bytes
    were. Meanwhile the kernel serves every other handle's reads from the empty staged file."""
    ws, fh, reader, acked = refused_with_a_second_handle(env, small_disk, monkeypatch, "kept.bin")
    of = fh._of
    real = of._reserve_past
    ballasts: list[Path] = []

    def racing(size: int, upto: int) -> None:
        ballasts.append(fill(small_disk, 8 * KiB))  # another writer takes the freed blocks
        ballasts.append(fill_up(small_disk))
        real(size, upto)

    monkeypatch.setattr(of, "_reserve_past", racing)
    with contextlib.suppress(NoSpace):
        ws.revert("kept.bin")
    monkeypatch.undo()
    seen = os.pread(of.fd, len(acked) + 1, 0)  # what the kernel serves the reader (passthrough)
    for ballast in ballasts:
        ballast.unlink()
    read = reader.read(0, len(acked) + 1)
    # the space is back; the other process extends the file it has open by a page (ftruncate,
    # then a store or write at the new tail: how records are appended to a mapped file)
    tail = os.urandom(4096)
    reader.truncate(len(acked) + len(tail))
    os.pwrite(of.fd, tail, len(acked))
    with contextlib.suppress(NoSpace):
        reader.close()
    with contextlib.suppress(NoSpace):
        fh.close()
    got = committed(env, ws, "kept.bin")
    assert got in (acked, acked + tail), (
        f"acknowledged bytes replaced: {len(got or b''):,} bytes committed, of them "
        f"{(got or b'')[: len(acked)].count(0):,} zeros where the acknowledged bytes were"
    )
    assert (len(seen), len(read)) == (len(acked),) * 2, (
        f"a reader of an acknowledged {len(acked):,}-byte file reads {len(seen):,} bytes"
    )


def test_one_streams_reservation_does_not_refuse_another_file_the_disk_has_room_for(
    unpacked_env: Env, tmp_path: Path, monkeypatch
) -> None:
    """The watcher grows a stream's reservation to four times what it holds (``grow``):
    before reserve13 a stream of 4 MiB held 16 MiB of the disk while it was open, and another
    file of 17 MiB written meanwhile (21 MiB in all on a 32 MiB disk) could not get its
    blocks: its write failed for space, where the daemon path (and a local disk) would take
    it. Now what a file holds past its end is at most a quarter of the room the disk would
    have without it (``Staging.ahead``). The watcher's steps are taken here after each write
    (``grow``, what it does on an event)."""
    with tmpfs_of(tmp_path, "32m") as disk:
        monkeypatch.setattr(staged, "STAGE_RESERVE", 1 * MiB)
        ws = staged_on(unpacked_env, disk)
        step = 256 * KiB

        def stream(fh, size: int) -> bytes:
            of = fh._of
            of._staging.watch.remove(of._wd)  # the watcher's steps, taken in order below
            data = os.urandom(size)
            for off in range(0, size, step):
                assert os.pwrite(of.fd, data[off : off + step], off) == min(step, size - off)
                of.grow()
            return data

        first = ws.open("stream.bin", create=True, truncate=True, staged=True)
        stream_data = stream(first, 4 * MiB)
        held = os.fstat(first._of.fd).st_blocks * 512
        second = ws.open("other.bin", create=True, truncate=True, staged=True)
        try:
            other_data = stream(second, 17 * MiB)
            second.close()
            refused = None
        except (OSError, NoSpace) as exc:
            refused = exc
        first.close()
        ws = unpacked_env.crash_and_reopen(ws)
        with ws.open("stream.bin") as fh:
            assert fh.read(0, 1 << 30) == stream_data
        assert refused is None, (
            f"a 17 MiB file on a 32 MiB disk failed for space ({refused}) while a 4 MiB stream "
            f"held {held / MiB:.0f} MiB of blocks"
        )
        with ws.open("other.bin") as fh:
            assert fh.read(0, 1 << 30) == other_data


def _punch(fd: int, offset: int, length: int) -> None:
    """Free ``[offset, offset + length)`` of a file, keeping its size (FALLOC_FL_PUNCH_HOLE)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    if libc.fallocate(fd, 0x02 | 0x01, offset, length) != 0:
        raise OSError(ctypes.get_errno(), "fallocate(PUNCH_HOLE)")


def test_a_revert_that_finds_no_block_for_a_hole_commits_nothing_until_truncated_to_zero(
    env: Env, small_disk: Path, monkeypatch
) -> None:
    """The lead's case after review11's: ``_restore`` writes the acknowledged bytes back in
    place, which needs new blocks only where the failed state left a hole. A full disk there
    leaves the staged file part restored: no commit may take it (it would mix the failed
    state into acknowledged bytes) until a truncate to 0; then the writer's new bytes commit."""
    monkeypatch.setattr(staged, "STAGE_RESERVE", 1 * MiB)
    ws = staged_on(env, small_disk)
    fh = ws.open("holey.bin", create=True, truncate=True, staged=True)
    of = fh._of
    of._staging.watch.remove(of._wd)  # no growth racing the ballast
    acked = os.urandom(200 * KiB)
    os.pwrite(of.fd, acked, 0)
    fh.fsync()
    os.pwrite(of.fd, b"x" * (2 * MiB), 0)  # past its reservation: refused
    with pytest.raises(NoSpace):
        fh.fsync()
    _punch(of.fd, 0, 300 * KiB)  # and no block left under the acknowledged range
    real = of._reserve_past
    ballasts: list[Path] = []

    def full(size: int, upto: int) -> None:
        ballasts.append(fill(small_disk, 8 * KiB))
        ballasts.append(fill_up(small_disk))  # no block left for the hole
        real(size, upto)

    monkeypatch.setattr(of, "_reserve_past", full)
    with pytest.raises(NoSpace):
        ws.revert("holey.bin")
    monkeypatch.undo()
    assert of.unrestored
    for ballast in ballasts:
        ballast.unlink()
    other = ws.open("holey.bin")
    with pytest.raises(NoSpace):
        other.fsync()  # space is back, but the staged file is not what was acknowledged
    other.truncate(0)  # the writer starts over: nothing is left that the revert owed
    assert not of.unrestored
    os.pwrite(of.fd, b"fresh", 0)
    other.close()
    with contextlib.suppress(NoSpace):
        fh.close()
    assert committed(env, ws, "holey.bin") == b"fresh"
