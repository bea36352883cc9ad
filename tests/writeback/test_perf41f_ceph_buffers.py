"""perf41f (issue 41): on RADOS and S3/RGW shared tiers too, a chunk's buffer of 1 MiB or more
is a ``ChunkBuffer`` (reused memory, ``datahub/aligned_buffers.py``), and an S3/RGW PUT of
it hashes and sends the buffer's bytes where they lie (before: a new ``bytes`` copy of every
chunk). Why: a ``bytearray`` grown WRITE by WRITE to a 4 MiB chunk was new memory for every
chunk, and with four writers the daemon's page faults and kernel CPU per MiB rose
(docs/benchmarks.md, "perf41f").

Seen here as behaviour, on moto, the session's Ceph RGW and a RADOS pool: the chunk's buffer
is a ``ChunkBuffer``, an S3 PUT's body is a view of it (the lean PUT's own argument, spied
on, not replaced), and the promises with reused buffers in play: a reused buffer never shows
an earlier chunk's bytes, a write over a chunk whose upload is in flight leaves the upload
its own bytes, truncates and holes read as zeros, and after a crash every acknowledged file
reads back exactly."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import tests.writeback.test_posix as posix
from datahub.aligned_buffers import ChunkBuffer
from datahub.storage.s3get import LeanGetter
from datahub.writeback.files import PROMOTE
from tests.writeback.conftest import Env, make_env

MiB = 1 << 20
CHUNK = 2 * MiB


@pytest.fixture(
    params=[
        "moto",
        pytest.param("ceph", marks=pytest.mark.ceph),
        pytest.param("rados", marks=pytest.mark.ceph),
    ]
)
def tier_env(
    tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Env]:
    """A workspace with 2 MiB chunks whose shared tier is a fresh moto or Ceph RGW bucket, or
    a fresh prefix of the session's RADOS pool."""
    if request.param == "rados":
        cluster = request.getfixturevalue("ceph_cluster")
        monkeypatch.syspath_prepend(cluster.vars["CEPH_PYLIB"])  # Debian's python3-rados
        monkeypatch.setenv("CEPH_CONF", cluster.vars["CEPH_CONF"])
        url = f"rados://{cluster.vars['CEPH_POOL']}/wb-{uuid.uuid4().hex[:12]}"
        env = make_env(tmp_path, page_size=CHUNK, shared_url=url)
    else:
        endpoint = request.getfixturevalue(f"{request.param}_endpoint")
        env = make_env(tmp_path, endpoint, shared_s3=True, page_size=CHUNK)
    yield env
    if request.param == "rados":
        shared = env.stores.store(env.config.resolved_shared_url)
        for info in list(shared.list()):
            shared.delete(info.key)
    env.close()


def test_a_checkpoint_is_buffered_in_chunk_buffers_and_put_from_them(
    tier_env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file written in 1 MiB calls: its chunks' buffers are ChunkBuffers from 1 MiB on (the
    12 KB tail's stays a bytearray); on S3 each
    chunk's PUT gets a view of its buffer, not a copy (on the base, bytearrays and a
    ``bytes`` copy per PUT); the bytes read back exactly, before and after a crash."""
    bodies: list[type] = []
    real = LeanGetter.put

    def spy(self, bucket, key, payload, *args, **kwargs):  # type: ignore[no-untyped-def]
        if len(payload) >= PROMOTE:
            bodies.append(type(payload))
        return real(self, bucket, key, payload, *args, **kwargs)

    monkeypatch.setattr(LeanGetter, "put", spy)
    ws = tier_env.open()
    data = os.urandom(3 * CHUNK + 12345)
    kinds = set()
    with ws.open("ckpt", create=True, truncate=True) as fh:
        for at in range(0, len(data), MiB):
            fh.write(at, data[at : at + MiB])
            kinds |= {type(buf) for buf in fh._of.buffers.values() if len(buf) >= PROMOTE}
    assert kinds == {ChunkBuffer}
    if tier_env.config.resolved_shared_url.startswith("s3://"):
        assert bodies and set(bodies) == {memoryview}, bodies
    assert posix.read_all(ws, "ckpt") == data
    ws2 = tier_env.crash_and_reopen(ws)
    assert posix.read_all(ws2, "ckpt") == data


def test_reused_buffers_never_show_an_earlier_chunks_bytes(tier_env: Env) -> None:
    """Buffers go back to a pool holding an earlier chunk's bytes past their length: holes,
    a truncate then a write past it, an unaligned tail read as written, zeros elsewhere."""
    ws = tier_env.open()
    with ws.open("old", create=True) as fh:
        for at in range(0, 4 * CHUNK, MiB):
            fh.write(at, b"\xaa" * MiB)  # full chunks: their buffers go back to the pool
    with ws.open("new", create=True) as fh:
        fh.write(MiB // 2, b"\x01" * MiB)  # a hole of 512 KiB first, in a promoted buffer
        assert isinstance(fh._of.buffers[0], ChunkBuffer)
        fh.write(CHUNK + 5, b"\x02" * (MiB + 3))  # the next chunk: a hole of 5 bytes
        fh.truncate(MiB // 2 + 10)
        fh.write(MiB + 100, b"\x03" * 7)  # past the cut: zeros in between
    want = bytes(MiB // 2) + b"\x01" * 10 + bytes(MiB // 2 + 90) + b"\x03" * 7
    assert posix.read_all(ws, "new") == want
    ws2 = tier_env.crash_and_reopen(ws)
    assert posix.read_all(ws2, "new") == want
    assert posix.read_all(ws2, "old") == b"\xaa" * 4 * CHUNK


def test_a_write_over_a_chunk_being_put_changes_only_the_file(tier_env: Env) -> None:
    """A full chunk starts uploading from its own buffer (write-behind); writes into that
    chunk meanwhile go to a copy, so the PUT sends the bytes it started with and the close
    commits the later ones: every round reads back as its last write left it."""
    ws = tier_env.open()
    want = bytearray()
    with ws.open("f", create=True) as fh:
        for round_ in range(3):
            piece = bytes([round_ + 1]) * CHUNK
            fh.write(0, piece)  # fills chunk 0: its upload starts
            fh.write(100, b"\xee" * 1000)  # into the chunk in flight: a copy takes it
            want[:] = piece[:100] + b"\xee" * 1000 + piece[1100:]
            assert fh.read(0, CHUNK) == bytes(want)
            fh.fsync()
    assert posix.read_all(ws, "f") == bytes(want)
    ws2 = tier_env.crash_and_reopen(ws)
    assert posix.read_all(ws2, "f") == bytes(want)


@pytest.mark.parametrize(
    "case",
    [
        posix.test_random_writes_match_a_bytearray,
        posix.test_truncate_shrink_then_grow_reads_zeros,
        posix.test_two_handles_share_unflushed_writes,
    ],
)
def test_posix_semantics_hold_with_chunk_buffers(
    case, tier_env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """test_posix's cases with 2 MiB chunks (there: 4 KiB, never a ChunkBuffer)."""
    monkeypatch.setattr(posix, "CHUNK", CHUNK)
    case(tier_env)
