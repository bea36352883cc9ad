"""Staged files (passthrough writes): a file whose bytes someone else writes into a local
file (the kernel, through a FUSE mount) keeps every write-back promise.

The tests write the staged file with ``os.pwrite`` on ``FileHandle.staged_fd``, exactly
what the kernel does for a passthrough handle; tests/fuse/test_workspace.py and
tests/writeback/test_mount_passthrough.py do it through real mounts.
"""

from __future__ import annotations

import os

import pytest

from datahub.errors import NoSpace, NotFound
from datahub.writeback.staged import StagedFile
from tests.writeback.conftest import CHUNK, Env, write

SIZES = [0, 100, CHUNK, 3 * CHUNK + 5]


def staged_write(fh, offset: int, data: bytes) -> None:
    os.pwrite(fh.staged_fd, data, offset)


def read_all(ws, path: str) -> bytes:
    with ws.open(path) as fh:
        return fh.read(0, 1 << 30)


@pytest.mark.parametrize("size", SIZES)
def test_close_makes_a_staged_file_durable(env: Env, size: int) -> None:
    ws = env.open()
    data = os.urandom(size)
    with ws.open("a.bin", create=True, truncate=True, staged=True) as fh:
        assert fh.staged_fd >= 0
        staged_write(fh, 0, data)
        assert ws.stat("a.bin").size == size  # stat sees what the kernel wrote
        assert fh.read(0, size + 10) == data
    assert ws.journal_record("a.bin")["size"] == size
    ws = env.crash_and_reopen(ws)  # acknowledged: survives a crash
    assert read_all(ws, "a.bin") == data
    ws.flush()
    assert env.origin().read("a.bin") == data


def test_bytes_reach_the_shared_tier_by_copy_not_by_python(env: Env, monkeypatch) -> None:
    """The chunks of a staged file (past the one-chunk small-file case) are copied with
    ChunkStore.copy_in, never handed to ChunkStore.write as Python bytes."""
    ws = env.open()
    written: list[int] = []
    write_chunk = ws.chunks.write
    monkeypatch.setattr(
        ws.chunks,
        "write",
        lambda key, data, path, trailer=b"": (
            written.append(len(data)),
            write_chunk(key, data, path, trailer),
        ),
    )
    with ws.open("big", create=True, truncate=True, staged=True) as fh:
        staged_write(fh, 0, os.urandom(5 * CHUNK))
    assert written == []
    assert len(ws.journal_record("big")["chunks"]) == 5


def test_writes_after_an_fsync_never_change_the_acknowledged_chunks(env: Env) -> None:
    ws = env.open()
    first, second = os.urandom(2 * CHUNK), os.urandom(CHUNK)
    fh = ws.open("f", create=True, truncate=True, staged=True)
    staged_write(fh, 0, first)
    fh.fsync()
    staged_write(fh, CHUNK // 2, second)  # unacknowledged, in place
    ws = env.crash_and_reopen(ws)
    assert read_all(ws, "f") == first


def test_an_unchanged_file_commits_nothing_a_changed_one_commits_again(env: Env) -> None:
    ws = env.open()
    fh = ws.open("f", create=True, truncate=True, staged=True)
    staged_write(fh, 0, b"x" * 1000)
    fh.fsync()
    gen = ws.journal_record("f")["gen"]
    fh.fsync()  # FLUSH after FSYNC, RELEASE after FLUSH: nothing changed
    assert ws.journal_record("f")["gen"] == gen
    staged_write(fh, 10, b"y")
    fh.fsync()
    assert ws.journal_record("f")["gen"] == gen + 1
    fh.close()
    assert read_all(ws, "f") == b"x" * 10 + b"y" + b"x" * 989


def test_truncate_of_a_staged_file(env: Env) -> None:
    ws = env.open()
    with ws.open("f", create=True, truncate=True, staged=True) as fh:
        staged_write(fh, 0, b"a" * (2 * CHUNK))
        fh.truncate(100)
        assert ws.stat("f").size == 100
        fh.truncate(CHUNK + 1)  # grown bytes read as zeros
    assert read_all(ws, "f") == b"a" * 100 + bytes(CHUNK + 1 - 100)


def test_only_new_or_truncated_files_are_staged(env: Env) -> None:
    ws = env.open()
    write(ws, "old", b"keep me")
    with ws.open("old", staged=True) as fh:  # not truncated: its bytes stay where they are
        assert fh.staged_fd == -1
        assert fh.read(0, 100) == b"keep me"
    with ws.open("old", truncate=True, staged=True) as fh:
        assert fh.staged_fd >= 0
        assert ws.stat("old").size == 0
        staged_write(fh, 0, b"new")
    assert read_all(ws, "old") == b"new"
    ws = env.crash_and_reopen(ws)
    assert read_all(ws, "old") == b"new"


def test_a_file_open_elsewhere_is_not_staged_and_handles_share_it(env: Env) -> None:
    ws = env.open()
    plain = ws.open("f", create=True)
    plain.write(0, b"through python")
    other = ws.open("f", truncate=True, staged=True)
    assert other.staged_fd == -1  # all handles of a file share one open file: not staged
    other.close()
    plain.close()
    staged = ws.open("g", create=True, truncate=True, staged=True)
    second = ws.open("g", staged=True)
    assert second.staged_fd == staged.staged_fd >= 0  # the same staged file: reads see the writes
    staged_write(staged, 0, b"seen")
    assert second.read(0, 10) == b"seen"
    second.close()
    staged.close()
    assert read_all(ws, "g") == b"seen"


def test_rename_and_unlink_of_an_open_staged_file(env: Env) -> None:
    ws = env.open()
    fh = ws.open("a", create=True, truncate=True, staged=True)
    staged_write(fh, 0, b"moved")
    ws.rename("a", "b")
    fh.close()
    assert read_all(ws, "b") == b"moved"
    with pytest.raises(NotFound):
        ws.stat("a")
    fh = ws.open("c", create=True, truncate=True, staged=True)
    staged_write(fh, 0, b"gone")
    fh.fsync()
    ws.unlink("c")
    assert fh.read(0, 10) == b"gone"  # POSIX: readable and writable until the last close
    staged_write(fh, 4, b"!")
    fh.close()
    assert [name for name, _ in ws.listdir("")] == ["b"]
    ws = env.crash_and_reopen(ws)
    assert [name for name, _ in ws.listdir("")] == ["b"]


def test_a_failed_copy_keeps_the_file_for_a_retry(env: Env, monkeypatch) -> None:
    ws = env.open()
    data = os.urandom(3 * CHUNK)
    fh = ws.open("f", create=True, truncate=True, staged=True)
    staged_write(fh, 0, data)

    def full(*args, **kwargs):
        raise NoSpace("shared tier full (test)")

    monkeypatch.setattr(ws.chunks, "copy_in", full)
    with pytest.raises(NoSpace):
        fh.fsync()
    assert ws.journal_record("f") == {}  # nothing half-written is acknowledged
    monkeypatch.undo()
    fh.close()  # the retry
    assert read_all(ws, "f") == data
    ws = env.crash_and_reopen(ws)
    assert read_all(ws, "f") == data


def test_the_staged_file_goes_with_the_last_handle(env: Env) -> None:
    ws = env.open()
    fh = ws.open("f", create=True, truncate=True, staged=True)
    fd = fh.staged_fd
    of = fh._of
    assert isinstance(of, StagedFile)
    fh.close()
    with pytest.raises(OSError):
        os.fstat(fd)
    assert of.fd == -1


def _wait(predicate, timeout: float = 10.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def test_a_mapping_that_outlives_the_last_close_is_committed_when_it_goes(env: Env) -> None:
    """What a FUSE mapping does, without FUSE: another open of the staged inode (the kernel's
    backing file of a mapping) maps it, the last handle closes, the mapping stores and goes.
    The workspace keeps the file open until then and commits the stores (lingering.py)."""
    import mmap

    ws = env.open()
    fh = ws.open("m", create=True, truncate=True, staged=True)
    staged_write(fh, 0, b"\0" * 8192)
    other = os.open(f"/proc/self/fd/{fh.staged_fd}", os.O_RDWR)
    mapping = mmap.mmap(other, 8192, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    os.close(other)  # the mapping holds its own open of the inode
    mapping[:5] = b"early"
    fh.close()  # commits "early"; the mapping still holds the staged file
    assert fh.lingering and ws.journal_record("m")["size"] == 8192
    mapping[:5] = b"after"  # a store into a page already dirty: no timestamp moves
    mapping.close()  # the last other open goes: inotify wakes the workspace
    _wait(lambda: not fh.lingering)
    assert read_all(ws, "m")[:5] == b"after"
    ws = env.crash_and_reopen(ws)  # committed, not only in memory
    assert read_all(ws, "m")[:5] == b"after"


def test_a_file_still_mapped_at_close_of_the_workspace_is_committed_whole(env: Env) -> None:
    import mmap

    ws = env.open()
    fh = ws.open("m", create=True, truncate=True, staged=True)
    staged_write(fh, 0, b"\0" * 4096)
    other = os.open(f"/proc/self/fd/{fh.staged_fd}", os.O_RDWR)
    mapping = mmap.mmap(other, 4096, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    os.close(other)
    mapping[:5] = b"early"
    fh.close()
    mapping[:5] = b"later"
    ws.close()  # still mapped: the close commits a whole copy
    mapping.close()
    assert read_all(env.open(), "m")[:5] == b"later"


def test_a_staged_file_that_outgrew_its_reservation_is_refused_one_fsynced_as_it_grew_is_kept(
    env: Env, monkeypatch
) -> None:
    """docs/writeback.md, "A full staging disk": a write the kernel failed for space leaves a
    staged file at least as long as its reservation, so a file that long is never committed
    (the daemon cannot tell it from a torn one); an fsync before the end moves the end on."""
    from datahub.writeback import staged

    monkeypatch.setattr(staged, "STAGE_RESERVE", 1 << 20)
    ws = env.open()
    data = os.urandom(3 << 19)  # 1.5 MiB
    refused = ws.open("refused.bin", create=True, truncate=True, staged=True)
    staged_write(refused, 0, data)
    with pytest.raises(NoSpace, match="reserved"):
        refused.fsync()
    kept = ws.open("kept.bin", create=True, truncate=True, staged=True)
    staged_write(kept, 0, data[: 900 << 10])
    kept.fsync()  # 900 KiB inside 1 MiB: committed, and the reservation grows to 1.8 MiB
    staged_write(kept, 900 << 10, data[900 << 10 :])
    kept.close()
    ws = env.crash_and_reopen(ws)
    assert read_all(ws, "kept.bin") == data
    with pytest.raises(NotFound):
        ws.stat("refused.bin")  # never acknowledged: gone with the crash


def test_a_staged_file_written_far_past_its_first_reservation_with_no_fsync_is_committed(
    env: Env, monkeypatch
) -> None:
    """Blocker (a) of docs/writeback.md point 7: a single stream of writes (``torch.save``)
    with no fsync grows far past the reservation made with the file. The watcher hears the
    writes (inotify) and reserves ahead, so the close commits it. The test waits, before
    each write that would leave the blocks counted, for the reservation to move: what it
    checks is that the watcher grows it, not how fast."""
    from datahub.writeback import staged

    monkeypatch.setattr(staged, "STAGE_RESERVE", 1 << 20)
    ws = env.open()
    data = os.urandom(12 << 20)
    step = 256 << 10
    fh = ws.open("ckpt.pt", create=True, truncate=True, staged=True)
    of = fh._of
    assert of.reserved == 1 << 20
    for off in range(0, len(data), step):
        _wait(lambda off=off: of.reserved > off + step)
        staged_write(fh, off, data[off : off + step])
    fh.close()
    ws = env.crash_and_reopen(ws)
    assert read_all(ws, "ckpt.pt") == data


def test_a_writer_that_outran_the_watcher_is_refused_never_committed(env: Env, monkeypatch) -> None:
    """The watcher's rule (``StagedFile._extend``): blocks given after the file already
    reached its reservation are not counted, since a write may have failed for space past
    it before they were given. Growing then (the watcher late) changes nothing: refused."""
    from datahub.writeback import staged

    monkeypatch.setattr(staged, "STAGE_RESERVE", 1 << 20)
    ws = env.open()
    fh = ws.open("late.bin", create=True, truncate=True, staged=True)
    staged_write(fh, 0, os.urandom(5 << 19))  # 2.5 MiB in one write: past the 1 MiB reserved
    fh._of.grow()  # what the watcher does on the write's event, however late
    fh._of._extend(16 << 20)  # and what an fsync's growth does
    assert fh._of.reserved == 1 << 20
    with pytest.raises(NoSpace, match="reserved"):
        fh.fsync()
    with pytest.raises(NoSpace):
        fh.close()
    ws = env.crash_and_reopen(ws)
    with pytest.raises(NotFound):
        ws.stat("late.bin")


def test_a_truncate_that_raced_a_write_past_it_counts_no_new_blocks(env: Env) -> None:
    """``StagedFile.truncate``: a write past the new size that lands between the truncate
    and its new reservation had no blocks reserved, so it may have failed half done: the
    file is refused until a later truncate, never committed torn. The race is made by
    writing between the two steps (a writer in the kernel can do it at that moment)."""
    ws = env.open()
    fh = ws.open("t.bin", create=True, truncate=True, staged=True)
    of = fh._of
    data = os.urandom(1 << 20)
    staged_write(fh, 0, data)
    fh.fsync()
    real = of._reserve_past

    def racing(size: int, upto: int) -> None:
        os.pwrite(of.fd, b"w" * 8192, size)  # the kernel writes past the truncated end
        real(size, upto)

    of._reserve_past = racing
    fh.truncate(4096)
    del of._reserve_past
    assert of.reserved <= 4096
    with pytest.raises(NoSpace):
        fh.fsync()
    fh.truncate(100)  # a truncate with nobody writing: counted again
    fh.close()
    assert read_all(env.crash_and_reopen(ws), "t.bin") == data[:100]


def test_a_growing_truncate_reserves_the_new_range_before_it_exists(env: Env, monkeypatch) -> None:
    """A write into the hole a growing truncate makes could fail for space half done and
    leave the size as the truncate set it, which no check sees: so the blocks of the new
    range are the file's before the file is that long (``StagedFile.truncate``).

    A first reservation of 1 MiB, not 64: the file grown past it is committed and read
    back in this suite's 4 KiB chunks (512 of them, not 18,432: 20-28 s of a loaded run)."""
    from datahub.writeback import staged

    monkeypatch.setattr(staged, "STAGE_RESERVE", 1 << 20)
    ws = env.open()
    fh = ws.open("g.bin", create=True, truncate=True, staged=True)
    of = fh._of
    staged_write(fh, 0, b"a" * 4096)
    fh.fsync()
    assert of.reserved <= 1 << 20, of.reserved
    grown = of.reserved + (1 << 20)  # past what was reserved: the new range needs new blocks
    calls: list[tuple[int, int]] = []  # (file size when called, bytes reserved after)
    real = of._reserve_past

    def recorded(size: int, upto: int) -> None:
        real(size, upto)
        calls.append((os.fstat(of.fd).st_size, of.reserved))

    of._reserve_past = recorded
    fh.truncate(grown)
    del of._reserve_past
    assert calls[0][0] == 4096 and calls[0][1] > grown, calls  # reserved while still 4 KiB long
    st = os.fstat(of.fd)
    assert st.st_size == grown and st.st_blocks * 512 >= grown
    fh.close()
    assert read_all(env.crash_and_reopen(ws), "g.bin") == b"a" * 4096 + bytes(grown - 4096)
