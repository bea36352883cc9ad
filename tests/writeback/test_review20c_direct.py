"""review20c: chunk files written with O_DIRECT from reused aligned buffers (bigwrites20,
``datahub/writeback/chunks.py``: ``_write_direct`` and its buffers, ``datahub/aligned_buffers.py``) by many
upload threads at once. Each write fills a buffer of its own: two chunks in flight never share
one. Every chunk reads back exactly (4 MiB heads, unaligned tails, heads of a staged
file's range, a source cut short). Real files, in-process, no mount."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from datahub.storage.local import LocalStore
from datahub.writeback.chunks import ChunkStore

MiB = 1 << 20


@pytest.fixture
def store(tmp_path: Path) -> ChunkStore:
    return ChunkStore(LocalStore(tmp_path / "root"), "writeback/ws", "workspace 'ws'", pack_bytes=0)


def test_chunks_written_at_once_each_read_back_as_their_own_bytes(store: ChunkStore, tmp_path: Path) -> None:
    # distinct fills, so a byte from another chunk's buffer shows; 4 MiB (one whole buffer) and
    # a 4 MiB + 1 page + tail (a second slice of a buffer), by 6 threads 4 times each
    sizes = [4 * MiB, 4 * MiB + 4096 + 77, 2 * 4096 + 5]
    jobs = [(i, bytes([i % 251 + 1]) * sizes[i % len(sizes)]) for i in range(24)]

    def put(job: tuple[int, bytes]) -> tuple[str, bytes]:
        i, data = job
        return store.put(100 + i, 0, data, f"f{i}"), data

    with ThreadPoolExecutor(6) as pool:
        written = list(pool.map(put, jobs))
    wrong = [key for key, data in written if store.get(key, len(data), "f") != data]
    assert not wrong

    # a staged file's ranges copied at once (``copy_in``): the same buffers, read by pread
    src = tmp_path / "staged"
    data = os.urandom(3 * 4 * MiB + 123)
    src.write_bytes(data)
    fd = os.open(src, os.O_RDONLY)
    try:
        keys = [store.new_key(7, i, 4 * MiB, "s") for i in range(3)]
        with ThreadPoolExecutor(3) as pool:
            list(pool.map(lambda i: store.copy_in(keys[i], fd, i * 4 * MiB + 1, 4 * MiB, "s"), range(3)))
    finally:
        os.close(fd)
    for i, key in enumerate(keys):
        want = data[i * 4 * MiB + 1 : (i + 1) * 4 * MiB + 1]
        want += bytes(4 * MiB - len(want))  # the last range runs past the source's end: zeros
        assert store.get(key, 4 * MiB, "s") == want, i
