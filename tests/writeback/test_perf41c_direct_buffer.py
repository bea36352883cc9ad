"""perf41c (issue 41): on a local shared tier a chunk's buffer of 1 MiB or more is itself the
aligned, huge-page-backed buffer its chunk file's ``O_DIRECT`` write takes
(``ChunkBuffer``, ``datahub/aligned_buffers.py``), so the chunk's bytes are not copied into another
buffer at the write (9 % of the daemon's CPU for 16 MiB files; docs/benchmarks.md, "perf41c").

Seen here as behaviour: no aligned spare buffer is taken for such a chunk's write; and the
promises with these buffers in play, which the rest of tests/writeback checks with 4 KiB
chunks (bytearrays only): a reused buffer never shows an earlier chunk's bytes, holes and
truncates read as zeros, an unaligned tail, pack members, a failed chunk write retried at
the fsync, a revert, a crash."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import tests.writeback.test_posix as posix
from datahub.aligned_buffers import AlignedBuffers, ChunkBuffer
from datahub.writeback import chunks as chunks_mod
from datahub.writeback.files import PROMOTE, OpenFile
from tests.writeback.conftest import LAYOUTS, Env, make_env

MiB = 1 << 20


def _direct_refused(where: Path) -> bool:
    """Whether the file system under ``where`` refuses ``O_DIRECT`` (then nothing is written
    with it, and a spare buffer is never taken either way)."""
    probe = where / "direct-probe"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o600)
    except OSError:
        return True
    os.close(fd)
    probe.unlink()
    return False


@pytest.fixture(params=list(LAYOUTS))
def big(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Env]:
    """A local shared tier with 2 MiB chunks, in both layouts (small chunks in packs, or not)."""
    env = make_env(tmp_path, page_size=2 * MiB, **LAYOUTS[request.param])
    yield env
    env.close()


class _CountingSpare(AlignedBuffers):
    def __init__(self) -> None:
        super().__init__(keep=4)
        self.taken = 0

    def take(self, size: int):  # type: ignore[no-untyped-def]
        self.taken += 1
        return super().take(size)


def test_a_full_chunk_is_written_from_its_own_buffer_not_a_copy(
    big: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file written in 1 MiB calls: each full chunk's ``O_DIRECT`` write takes no spare
    aligned buffer (on the base every chunk took one and was copied into it), and the
    chunk files hold the bytes written."""
    if _direct_refused(tmp_path):
        pytest.skip("this file system refuses O_DIRECT: nothing is written with it")
    spare = _CountingSpare()
    monkeypatch.setattr(chunks_mod, "_spare", spare)
    ws = big.open()
    data = os.urandom(8 * MiB)
    with ws.open("ckpt", create=True, truncate=True) as fh:
        for at in range(0, len(data), MiB):
            fh.write(at, data[at : at + MiB])
    assert spare.taken == 0
    assert posix.read_all(ws, "ckpt") == data
    ws2 = big.crash_and_reopen(ws)
    assert posix.read_all(ws2, "ckpt") == data


def test_a_reused_buffer_never_shows_an_earlier_chunks_bytes(big: Env) -> None:
    """Buffers go back to a pool and hold an earlier chunk's bytes past their length: a hole
    before a first write, a truncate then a write past it, read as zeros."""
    ws = big.open()
    with ws.open("old", create=True) as fh:
        for at in range(0, 8 * MiB, MiB):
            fh.write(at, b"\xaa" * MiB)  # full chunks: their buffers go back to the pool
    with ws.open("new", create=True) as fh:
        fh.write(MiB // 2, b"\x01" * MiB)  # a hole of 512 KiB first, in a promoted buffer
        assert isinstance(fh._of.buffers[0], ChunkBuffer)
        fh.write(2 * MiB + 5, b"\x02" * (MiB + 3))  # the next chunk: a hole of 5 bytes
        fh.truncate(MiB // 2 + 10)
        fh.write(MiB + 100, b"\x03" * 7)  # past the cut: zeros in between
    want = bytes(MiB // 2) + b"\x01" * 10 + bytes(MiB // 2 + 90) + b"\x03" * 7
    assert posix.read_all(ws, "new") == want
    ws2 = big.crash_and_reopen(ws)
    assert posix.read_all(ws2, "new") == want


@pytest.mark.parametrize(
    "case",
    [
        posix.test_random_writes_match_a_bytearray,
        posix.test_sparse_extension_reads_zeros,
        posix.test_truncate_shrink_then_grow_reads_zeros,
        posix.test_two_handles_share_unflushed_writes,
    ],
)
@pytest.mark.parametrize("chunk", [PROMOTE, 2 * MiB])
def test_posix_semantics_hold_with_direct_buffers(
    case: Callable[[Env], None], chunk: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """test_posix's cases with chunks of 1 and 2 MiB (there: 4 KiB, never a ChunkBuffer)."""
    monkeypatch.setattr(posix, "CHUNK", chunk)
    for name, layout in LAYOUTS.items():
        env = make_env(tmp_path / name.replace(" ", "-"), page_size=chunk, **layout)
        try:
            case(env)
        finally:
            env.close()


def test_a_revert_with_direct_buffers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """test_posix's revert (write-behind of promoted buffers dropped) with 1 MiB chunks."""
    monkeypatch.setattr(posix, "CHUNK", PROMOTE)
    env = make_env(tmp_path, page_size=PROMOTE)
    try:
        posix.test_revert_puts_a_file_back_to_its_last_acknowledged_state(env)
    finally:
        env.close()


def test_a_failed_chunk_write_keeps_its_buffer_for_the_fsync(
    big: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write-behind chunk write that fails for space leaves the chunk dirty in its buffer;
    the close writes it again, whole."""
    failed: list[int] = []
    real = chunks_mod.ChunkStore.write

    def failing_once(self, key, data, path, trailer=b""):  # type: ignore[no-untyped-def]
        if isinstance(data, ChunkBuffer) and not failed:
            failed.append(len(data))
            raise chunks_mod._os_error(OSError(errno.ENOSPC, "No space left on device"), "test", key)
        return real(self, key, data, path, trailer)

    monkeypatch.setattr(chunks_mod.ChunkStore, "write", failing_once)
    ws = big.open()
    data = os.urandom(6 * MiB + 4097)  # and an unaligned tail
    with ws.open("f", create=True) as fh:
        for at in range(0, len(data), MiB):
            fh.write(at, data[at : at + MiB])
    assert failed == [2 * MiB]
    assert posix.read_all(ws, "f") == data
    ws2 = big.crash_and_reopen(ws)
    assert posix.read_all(ws2, "f") == data


@pytest.mark.parametrize("length", [0, 5, 4096, 3 * 4096 + 7, MiB, 2 * MiB - 1, 2 * MiB])
def test_a_chunk_file_from_a_chunk_buffer_holds_its_bytes(tmp_path: Path, length: int) -> None:
    """``_write_new`` of a ChunkBuffer: the aligned head from the buffer, an unaligned tail
    through the page cache, the same file as from ``bytes``; and bytes past its length (a
    reused buffer's) are not written."""
    data = os.urandom(length)
    buf = ChunkBuffer(2 * MiB)
    buf.extend(b"\xff" * (2 * MiB))
    del buf[0:]
    buf.extend(data)
    target = tmp_path / "chunk"
    chunks_mod._write_new(target, buf, "test", "k")
    assert target.read_bytes() == data
    chunks_mod._write_new(tmp_path / "from-bytes", data, "test", "k2")
    assert (tmp_path / "from-bytes").read_bytes() == data


def test_a_chunk_buffer_refused_at_the_io_is_written_through_the_page_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file system that takes ``O_DIRECT`` but refuses the first write (an alignment above
    4 KiB): the chunk file from a ChunkBuffer is emptied, written whole through the page cache,
    and the device is remembered, as for a chunk from bytes (tests/writeback/test_direct_chunks20.py)."""
    real = chunks_mod.os.pwrite
    direct: list[int] = []

    def pwrite(fd: int, data, offset: int) -> int:  # type: ignore[no-untyped-def]
        if chunks_mod.fcntl.fcntl(fd, chunks_mod.fcntl.F_GETFL) & os.O_DIRECT:
            direct.append(fd)
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(fd, data, offset)

    monkeypatch.setattr(chunks_mod.os, "pwrite", pwrite)
    monkeypatch.setattr(chunks_mod, "_direct_refused", set())
    data = os.urandom(MiB + 4096 + 3)
    buf = ChunkBuffer.of(data, 2 * MiB)
    target = tmp_path / "chunk"
    chunks_mod._write_new(target, buf, "test", "k")
    if _direct_refused(tmp_path):
        assert not direct
    else:
        assert direct and os.stat(tmp_path).st_dev in chunks_mod._direct_refused
    assert target.read_bytes() == data


def test_a_chunk_buffer_written_as_a_pack_member(tmp_path: Path) -> None:
    """A ChunkBuffer cut below 1 MiB (a truncate) whose key is a pack member: one write from
    the buffer into the pack, read back whole."""
    env = make_env(tmp_path, page_size=2 * MiB)
    try:
        ws = env.open()
        store = ws.uploads.chunks
        data = os.urandom(100_000)
        buf = ChunkBuffer.of(os.urandom(MiB), 2 * MiB)
        del buf[0:]
        buf.extend(data)
        key = store.new_key(1, 0, len(buf), "p")
        assert store.packed(key)
        store.write(key, buf, "p")
        assert store.get(key, len(data), "p") == data
    finally:
        env.close()


def test_small_buffers_stay_bytearrays(big: Env) -> None:
    """A chunk buffer under 1 MiB stays a bytearray (a ChunkBuffer's memory is its capacity
    in huge pages once touched); one that grows to 1 MiB is promoted with its bytes."""
    ws = big.open()
    with ws.open("small", create=True) as fh:
        fh.write(0, b"a" * 100_000)
        of: OpenFile = fh._of
        assert type(of.buffers[0]) is bytearray
        fh.write(100_000, b"b" * (MiB - 100_000))
        assert isinstance(of.buffers[0], ChunkBuffer)
        assert fh.read(0, MiB) == b"a" * 100_000 + b"b" * (MiB - 100_000)
