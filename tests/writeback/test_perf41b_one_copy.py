"""perf41b (issue 41): a write into a file's chunk buffer copies its bytes once. CPython's
bytearray slice assignment (``buf[a:b] = data``) first copies a value that is not a bytearray
(a WRITE's ``bytes``) into a temporary bytearray and then copies that in: every byte written
through a workspace mount was copied twice on its way into the buffer, 6.5 % of the daemon's
CPU for 16 MiB files (docs/benchmarks.md, "perf41b"). Seen here as memory, not time: the
temporary copy is an allocation as large as the write (``tracemalloc``), in place and
appended, and the bytes read back are the ones written, holes and overwrites included."""

from __future__ import annotations

import os
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from datahub.writeback.files import _put
from tests.writeback.conftest import Env, make_env

MiB = 1 << 20


@pytest.fixture
def big_chunks(tmp_path: Path) -> Iterator[Env]:
    """Chunks of 4 MiB (the default page size), so 1 MiB writes stay in one buffer."""
    env = make_env(tmp_path, page_size=4 * MiB)
    yield env
    env.close()


def _allocated_during(call: Callable[[], object]) -> int:
    """The most memory ``call`` had allocated at once beyond what it started with, in bytes."""
    tracemalloc.start()
    try:
        start, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        call()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak - start


def test_an_overwrite_inside_a_chunk_buffer_allocates_no_copy_of_its_bytes(big_chunks: Env) -> None:
    ws = big_chunks.open()
    first, second = os.urandom(2 * MiB), os.urandom(MiB)
    with ws.open("ckpt", create=True, truncate=True) as fh:
        fh.write(0, first)
        grew = _allocated_during(lambda: fh.write(MiB // 2, second))  # inside the 2 MiB buffered
        assert fh.read(0, 2 * MiB) == first[: MiB // 2] + second + first[MiB // 2 + MiB :]
    # before: a 1 MiB temporary bytearray of ``second`` (grew == 1 MiB + a few hundred bytes)
    assert grew < MiB // 4, grew


def test_an_appending_write_allocates_only_the_buffer_it_grows_into(big_chunks: Env) -> None:
    ws = big_chunks.open()
    first, second = os.urandom(MiB), os.urandom(MiB)
    with ws.open("ckpt", create=True, truncate=True) as fh:
        fh.write(0, first)
        grew = _allocated_during(lambda: fh.write(MiB, second))
        assert fh.read(0, 2 * MiB) == first + second
    # the buffer's growth to 2 MiB (a realloc, traced as the new block) and no more; before:
    # a 1 MiB temporary bytearray beside it (grew == 3 MiB)
    assert grew < 2 * MiB + MiB // 4, grew


@pytest.mark.parametrize(
    ("size", "at", "length"),
    [(0, 0, 10), (10, 10, 5), (10, 3, 4), (10, 6, 9), (10, 0, 10), (10, 0, 25), (0, 0, 0), (7, 7, 0)],
)
def test_put_writes_what_the_slice_assignment_did(size: int, at: int, length: int) -> None:
    """In place, across the end, appended, empty: the bytes are those of ``buf[a:b] = data``,
    for a memoryview of bytes and of another byte format ('c')."""
    base = bytes(range(100, 100 + size))
    data = bytes(range(length))
    for piece in (memoryview(data), memoryview(data).cast("c")):
        expected = bytearray(base)
        expected[at : at + length] = data
        got = bytearray(base)
        _put(got, at, piece)
        assert got == expected
        got.extend(b"x")  # no export of the buffer left behind (a resize would raise BufferError)
