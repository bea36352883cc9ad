"""Chunk files on a local shared tier are written with O_DIRECT (bigwrites20, issue 41): the
bytes reach the disk from one aligned buffer instead of being copied into new page-cache
pages, which was most of the daemon's CPU for big files through a workspace mount. What must
hold: the chunk reads back exactly (aligned head direct, unaligned tail through the page
cache), a file system that refuses O_DIRECT gets the page-cache write, and the chunk leaves
no page cache behind (the one property that tells the two writes apart)."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest

from datahub.storage.local import LocalStore
from datahub.writeback import chunks as chunks_module
from datahub.writeback.chunks import ChunkStore
from tests.pagecache import resident_pages


@pytest.fixture
def store(tmp_path: Path) -> ChunkStore:
    kind = subprocess.run(["stat", "-f", "-c", "%T", str(tmp_path)], capture_output=True, text=True).stdout
    if kind.strip() == "tmpfs":
        pytest.skip("tmpfs: its page cache is the file, there is no disk write to take it out of")
    return ChunkStore(LocalStore(tmp_path / "root"), "writeback/ws", "workspace 'ws'", pack_bytes=0)


@pytest.mark.parametrize("length", [4096, 3 * 4096 + 123, 4 * 1024**2])
def test_a_chunk_file_is_written_past_the_page_cache_and_reads_back_exactly(
    store: ChunkStore, length: int
) -> None:
    data = os.urandom(length)
    key = store.put(7, 0, data, "ckpt/model.pt")
    path = store.local_root / key
    # the aligned head went to the disk directly: at most the unaligned tail's page is cached
    assert resident_pages(path) <= (1 if length % 4096 else 0)
    assert store.get(key, length, "ckpt/model.pt") == data
    assert path.stat().st_size == length


def test_a_file_system_refusing_o_direct_gets_the_page_cache_write(store: ChunkStore, monkeypatch) -> None:
    real = chunks_module.fcntl.fcntl

    def refuse(fd: int, cmd: int, arg: int = 0) -> int:
        if cmd == chunks_module.fcntl.F_SETFL and arg & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(fd, cmd, arg)

    monkeypatch.setattr(chunks_module.fcntl, "fcntl", refuse)
    monkeypatch.setattr(chunks_module, "_direct_refused", set())
    data = os.urandom(2 * 4096 + 5)
    key = store.put(8, 0, data, "a")
    assert store.get(key, len(data), "a") == data
    assert (
        os.stat(store.local_root / key).st_dev in chunks_module._direct_refused
    )  # asked once per file system


def test_a_direct_write_refused_at_the_io_is_written_again_through_the_page_cache(
    store: ChunkStore, monkeypatch
) -> None:
    real = chunks_module.os.pwrite
    direct: list[int] = []

    def pwrite(fd: int, data, offset: int) -> int:
        if chunks_module.fcntl.fcntl(fd, chunks_module.fcntl.F_GETFL) & os.O_DIRECT:
            direct.append(fd)
            raise OSError(errno.EINVAL, "Invalid argument")  # an alignment above 4 KiB
        return real(fd, data, offset)

    monkeypatch.setattr(chunks_module.os, "pwrite", pwrite)
    monkeypatch.setattr(chunks_module, "_direct_refused", set())
    data = os.urandom(4 * 4096)
    key = store.put(9, 0, data, "b")
    assert direct and store.get(key, len(data), "b") == data
    assert (store.local_root / key).stat().st_size == len(data)


def test_a_staged_range_is_copied_past_the_page_cache_and_a_short_source_reads_as_zeros(
    store: ChunkStore, tmp_path: Path
) -> None:
    src = tmp_path / "staged"
    data = os.urandom(3 * 4096 + 77)
    src.write_bytes(data)
    fd = os.open(src, os.O_RDONLY)
    try:
        key = store.new_key(5, 0, 2 * 4096 + 10, "s")
        store.copy_in(key, fd, 4096 - 3, 2 * 4096 + 10, "s")
        assert resident_pages(store.local_root / key) <= 1  # the unaligned tail's page at most
        assert store.get(key, 2 * 4096 + 10, "s") == data[4096 - 3 : 3 * 4096 + 7]
        past = store.new_key(5, 1, 4 * 4096, "s")  # the staged file was cut short meanwhile
        store.copy_in(past, fd, 2 * 4096, 4 * 4096, "s")
        assert store.get(past, 4 * 4096, "s") == data[2 * 4096 :] + bytes(4 * 4096 - len(data) + 2 * 4096)
    finally:
        os.close(fd)
