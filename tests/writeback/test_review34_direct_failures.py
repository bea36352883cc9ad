"""review34: a chunk file whose ``O_DIRECT`` write fails part-way is whole or absent, never a
prefix a later read takes as the chunk (``chunks._direct_writes``, one loop for bytes and
``ChunkBuffer`` since d742726b).

The failures met here, each in the bytes path and the ``ChunkBuffer`` path: a refusal (EINVAL)
after some slices went direct, a short write, ENOSPC mid-chunk, and an fsync that fails. What
must hold: the write raises (a StorageError naming the chunk), no file is left under the key,
and a retry under the same key then writes it whole; a short write is finished, not taken
as the chunk."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest

from datahub.aligned_buffers import ChunkBuffer
from datahub.errors import DatahubError
from datahub.storage.local import LocalStore
from datahub.writeback import chunks as chunks_module
from datahub.writeback.chunks import ChunkStore

SLICE = chunks_module._DIRECT_SLICE
LENGTH = 2 * SLICE + 3 * 4096 + 77  # three direct slices and an unaligned tail


@pytest.fixture
def store(tmp_path: Path) -> ChunkStore:
    kind = subprocess.run(["stat", "-f", "-c", "%T", str(tmp_path)], capture_output=True, text=True).stdout
    if kind.strip() == "tmpfs":
        pytest.skip("tmpfs refuses O_DIRECT: these writes never take the direct path")
    return ChunkStore(LocalStore(tmp_path / "root"), "writeback/ws", "workspace 'ws'", pack_bytes=0)


def _direct(fd: int) -> bool:
    return bool(chunks_module.fcntl.fcntl(fd, chunks_module.fcntl.F_GETFL) & os.O_DIRECT)


def _payload(kind: str, data: bytes) -> bytes | ChunkBuffer:
    return ChunkBuffer.of(data, len(data)) if kind == "buffer" else data


@pytest.fixture(params=["bytes", "buffer"])
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


def _failing_pwrite(monkeypatch: pytest.MonkeyPatch, fail_at: int, error: int) -> list[int]:
    """``os.pwrite`` that raises ``error`` for the direct write at offset ``fail_at`` (once)."""
    real = chunks_module.os.pwrite
    seen: list[int] = []

    def pwrite(fd: int, data, offset: int) -> int:
        if _direct(fd):
            seen.append(offset)
            if offset == fail_at and len(seen) == 1 + fail_at // SLICE:
                raise OSError(error, os.strerror(error))
        return real(fd, data, offset)

    monkeypatch.setattr(chunks_module.os, "pwrite", pwrite)
    monkeypatch.setattr(chunks_module, "_direct_refused", set())
    return seen


@pytest.mark.parametrize("error", [errno.EINVAL, errno.ENOSPC, errno.EIO])
def test_a_direct_write_failing_mid_chunk_leaves_no_file(
    store: ChunkStore, kind: str, error: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = os.urandom(LENGTH)
    seen = _failing_pwrite(monkeypatch, SLICE, error)
    key = store.new_key(3, 0, LENGTH, "ckpt")
    with pytest.raises(DatahubError, match="ckpt"):
        store.write(key, _payload(kind, data), "ckpt")
    assert seen[:2] == [0, SLICE]  # one slice went direct before the failure
    assert not (store.local_root / key).exists()  # never a prefix under the chunk's key
    monkeypatch.undo()
    store.write(key, _payload(kind, data), "ckpt")  # the retry (the fsync's) writes it whole
    assert store.get(key, LENGTH, "ckpt") == data


def test_a_short_direct_write_is_finished_not_taken_as_the_chunk(
    store: ChunkStore, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that takes fewer bytes than it was given (aligned: a file system may) is
    followed by the rest; the file holds every byte."""
    real = chunks_module.os.pwrite

    def short(fd: int, data, offset: int) -> int:
        if _direct(fd) and len(data) > 2 * 4096:
            with memoryview(data) as view, view[: len(view) // 2 // 4096 * 4096] as half:
                return real(fd, half, offset)
        return real(fd, data, offset)

    monkeypatch.setattr(chunks_module.os, "pwrite", short)
    monkeypatch.setattr(chunks_module, "_direct_refused", set())
    data = os.urandom(LENGTH)
    key = store.put(4, 0, _payload(kind, data), "short")
    assert (store.local_root / key).stat().st_size == LENGTH
    assert store.get(key, LENGTH, "short") == data


def test_a_failed_fsync_fails_the_write_and_leaves_no_file(
    store: ChunkStore, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fsync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(chunks_module.os, "fsync", fsync)
    data = os.urandom(LENGTH)
    key = store.new_key(5, 0, LENGTH, "synced")
    with pytest.raises(DatahubError, match="synced"):
        store.write(key, _payload(kind, data), "synced")
    assert not (store.local_root / key).exists()
