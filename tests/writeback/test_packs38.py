"""A pack is deleted only when every member is dead, and the live members' bytes always read
back (packs38: the live sets are a sorted array of offsets and a byte each, ``packs._Members``).

Checked against a model by hypothesis, at two levels: ``Packs`` alone over a real directory
(many short sequences: new members, overwrites, unlinks, a member written and given up,
garbage deleted a second time, crash and reopen with the live keys adopted in any order and
the orphan packs deleted), and a whole workspace over a real journal and shared tier (fewer:
writes, overwrites, unlinks, renames, a file held open across a collection, flushes, crash
and reopen). A count of live members instead of the membership fails the first (a second
delete of one member takes another's place, and its pack goes under it).
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from datahub.writeback.packs import (
    COVER_MAGIC,
    COVER_PIECE,
    Packs,
    _decode_covers,
    _file_covers,
    _Members,
    encode_cover,
)
from tests.writeback.conftest import CHUNK, make_env, objects_of, write

PREFIX = "writeback/ws/j-1"
FILES = 5

_op = st.one_of(
    st.tuples(st.just("put"), st.integers(0, FILES - 1), st.integers(1, 40)),
    st.tuples(st.just("unlink"), st.integers(0, FILES - 1)),
    st.tuples(st.just("failed"), st.integers(0, FILES - 1), st.integers(1, 40)),
    st.tuples(st.just("again"), st.integers(0, 50)),
    st.tuples(st.just("crash"), st.integers(0, 2**16)),
)


class PackModel:
    """``Packs`` under test beside what must hold: each file's one live member and its bytes."""

    def __init__(self, root: Path, pack_bytes: int) -> None:
        self.root, self.pack_bytes = root, pack_bytes
        self.packs = Packs(root, PREFIX, pack_bytes)
        self.files: dict[int, tuple[str, bytes]] = {}  # file -> (its member, its bytes)
        self.dead: list[str] = []  # every member given up, this session or an earlier one
        self.serial = 0

    def step(self, op: tuple) -> None:
        name = op[0]
        if name == "put":  # a new file, or a new version of one: its old member dies after
            _, f, size = op
            self.serial += 1
            data = bytes([self.serial % 251 + 1]) * size
            key = self.packs.reserve(f, 0, size)
            self.packs.write(key, data)
            old = self.files.get(f)
            self.files[f] = (key, data)
            if old is not None:
                self.kill(old[0])
        elif name == "unlink" and op[1] in self.files:
            self.kill(self.files.pop(op[1])[0])
        elif name == "failed":  # written, then given up (its commit failed: unreferenced)
            _, f, size = op
            key = self.packs.reserve(f, 0, size)
            self.packs.write(key, b"\xff" * size)
            self.kill(key)
        elif name == "again" and self.dead:  # the collector deleting a listed key again
            self.packs.delete(self.dead[op[1] % len(self.dead)])
        elif name == "crash":
            self.reopen(random.Random(op[1]))

    def kill(self, key: str) -> None:
        self.packs.delete(key)
        self.dead.append(key)

    def reopen(self, rng: random.Random) -> None:
        """A restart as ``_recover`` makes it: the journal's keys adopted in batches, in any
        order (one twice), then every pack no key names deleted as an orphan."""
        self.packs.close()
        self.packs = Packs(self.root, PREFIX, self.pack_bytes)
        keys = [key for key, _ in self.files.values()]
        rng.shuffle(keys)
        if keys:
            keys.append(keys[0])
        cut = rng.randrange(len(keys) + 1)
        self.packs.adopt(keys[:cut])
        self.packs.adopt(keys[cut:])
        for pack in self.pack_files() - self.named_packs():
            os.unlink(self.root / pack)

    def pack_files(self) -> set[str]:
        directory = self.root / PREFIX / "packs"
        return {f"{PREFIX}/packs/{n}" for n in os.listdir(directory)} if directory.is_dir() else set()

    def named_packs(self) -> set[str]:
        return {self.packs.object_of(key) for key, _ in self.files.values()}

    def check(self) -> None:
        for key, data in self.files.values():
            path, offset = self.packs.path_of(key)
            with open(path, "rb") as fh:  # a live member's pack exists, its bytes whole
                fh.seek(offset)
                assert fh.read(len(data)) == data, key
        assert self.pack_files() == self.named_packs()  # and no pack outlives its members


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(_op, max_size=40), pack_bytes=st.sampled_from([1, 60, 200, 1000]))
@example(  # garbage deleted twice in a session: the second delete is no member's
    ops=[("put", 0, 10), ("put", 1, 10), ("unlink", 0), ("again", 0)], pack_bytes=200
).via("the collector deletes a listed key again")
@example(  # garbage of an earlier session deleted after a restart
    ops=[("put", 0, 10), ("put", 1, 10), ("unlink", 0), ("crash", 1), ("again", 0)], pack_bytes=200
).via("a key listed by an earlier session")
def test_a_pack_goes_exactly_when_its_last_member_does(tmp_path_factory, ops, pack_bytes) -> None:
    model = PackModel(tmp_path_factory.mktemp("packs"), pack_bytes)
    try:
        for op in ops:
            model.step(op)
            model.check()
    finally:
        model.packs.close()


@settings(max_examples=150, deadline=None)
@given(
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("add"), st.integers(1, 4)),
            st.tuples(st.just("adopt"), st.integers(0, 300)),
            st.tuples(st.just("adopt"), st.integers(2**32, 2**32 + 3)),
            st.tuples(st.just("discard"), st.integers(0, 300)),
            st.tuples(st.just("ask"), st.integers(0, 300)),
        ),
        max_size=200,
    )
)
def test_members_answer_as_a_set_does(ops) -> None:
    """``_Members`` against a ``set``: appended and adopted offsets (any order, repeats, above
    4 GiB), deaths, questions, compaction once the dead outnumber the live."""
    members, model, top = _Members(), set(), 0
    for name, value in ops:
        if name == "add":
            top += value
            members.add(top)
            model.add(top)
        elif name == "adopt":
            members.adopt(value)
            model.add(value)
            top = max(top, value)
        elif name == "discard":
            left = members.discard(value)
            assert left == (len(model) - 1 if value in model else None)
            model.discard(value)
        else:
            assert (value in members) == (value in model)
            assert len(members) == len(model)
    assert len(members) == len(model) and all(o in members for o in model)


def test_members_cost_about_five_bytes_each_and_shrink_when_most_die() -> None:
    """The memory: ~5 bytes a member (a Python ``set`` took 85), and a pack kept alive by a few
    members holds no more than twice their entries."""
    members = _Members()
    for offset in range(0, 100_000 * 64, 64):
        members.add(offset)
    assert members._offsets.itemsize * len(members._offsets) + len(members._alive) <= 100_000 * 5.1
    for offset in range(0, 100_000 * 64 - 640, 64):
        assert members.discard(offset) is not None
    assert len(members) == 10
    assert len(members._offsets) <= 2 * 64


@pytest.fixture(scope="module")
def packed_envs(tmp_path_factory):
    """Workspaces with small packs (several per example), one directory per example."""
    made = []

    def make():
        e = make_env(tmp_path_factory.mktemp("ws"), writeback_pack_bytes=4 * CHUNK)
        made.append(e)
        return e

    yield make
    for e in made:
        e.close()


_ws_op = st.one_of(
    st.tuples(st.just("write"), st.integers(0, FILES - 1), st.integers(1, 2 * CHUNK)),
    st.tuples(st.just("unlink"), st.integers(0, FILES - 1)),
    st.tuples(st.just("rename"), st.integers(0, FILES - 1), st.integers(0, FILES - 1)),
    st.tuples(st.just("hold"), st.integers(0, FILES - 1)),
    st.tuples(st.just("gc"), st.just(0)),
    st.tuples(st.just("flush"), st.just(0)),
    st.tuples(st.just("crash"), st.just(0)),
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(_ws_op, min_size=1, max_size=14))
@example(  # an unlinked file's chunk still listed at a crash: recovery's collection deletes it
    ops=[("write", 0, 10), ("write", 1, 10), ("unlink", 0), ("crash", 0)]
).via("garbage of an earlier session beside a live chunk of its pack")
def test_a_workspace_never_loses_a_packed_file(packed_envs, ops) -> None:
    """Through the journal: every file reads back its bytes after any sequence (a collection
    with a file held open, ``Overlay.held_ids``, included), and after a collection with no file
    open no pack is left that no record names."""
    env = packed_envs()
    ws = env.open()
    files: dict[str, bytes] = {}
    held = None
    serial = 0
    try:
        for name, a, *rest in ops:
            path = f"f{a}"
            if name == "write":
                serial += 1
                files[path] = bytes([serial % 251 + 1]) * rest[0]
                write(ws, path, files[path])
            elif name == "unlink" and path in files and (held is None or held[0] != path):
                ws.unlink(path)
                del files[path]
            elif name == "rename" and path in files and f"f{rest[0]}" != path:
                target = f"f{rest[0]}"
                if held is not None and held[0] in (path, target):
                    continue
                ws.rename(path, target)
                files[target] = files.pop(path)
            elif name == "hold" and path in files and held is None:
                held = (path, ws.open(path))  # its garbage stays while it is open
                write(ws, path, files[path][::-1] + b"x")
                files[path] = files[path][::-1] + b"x"
            elif name == "gc":
                ws.flusher.gc()
            elif name == "flush":
                ws.flush()
            elif name == "crash":
                held = None  # the process died with it
                ws = env.crash_and_reopen(ws)
            for p, data in files.items():
                with ws.open(p) as fh:
                    assert fh.read(0, len(data) + 1) == data, p
        if held is not None:
            held[1].close()
        # A background flush may still pin a garbage chunk it planned to upload (gc skips it
        # and the next collection deletes it): flush first, so the collection sees no pins.
        ws.flush()
        ws.flusher.gc()
        with ws.journal.read() as txn:
            named = objects_of(ws, [k for _, rec in txn.files() for k, _ in rec["chunks"].values()])
        packs = {k for k in env.shared_keys() if "/packs/" in k}
        assert packs == {k for k in named if "/packs/" in k}
    finally:
        if not ws._closed:
            ws.close()


_record = st.fixed_dictionaries(
    {"id": st.integers(0, 2**40), "len": st.integers(0, 50), "path": st.text(max_size=30)}
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    parts=st.lists(
        st.one_of(
            st.binary(max_size=40),
            st.just(COVER_MAGIC),  # chunk bytes that hold the magic, or a torn record
            st.builds(lambda c, r: encode_cover(c, r), st.integers(0, 2**40), _record),
            st.builds(lambda c, r: encode_cover(c, r)[:-3], st.integers(0, 2**40), _record),
        ),
        max_size=12,
    ),
    piece=st.integers(1, 90),
)
def test_cover_records_read_in_pieces_find_what_a_whole_read_does(tmp_path_factory, parts, piece) -> None:
    """The replay reads a pack ``COVER_PIECE`` bytes at a time: it finds exactly the records
    (and offsets) the read of the whole pack found, records across pieces included."""
    path = tmp_path_factory.mktemp("covers") / "pack"
    data = b"".join(parts)
    path.write_bytes(data)
    with open(path, "rb") as fh:
        assert list(_file_covers(fh.fileno(), piece)) == list(_decode_covers(data))


def test_the_replay_reads_a_pack_a_piece_at_a_time(tmp_path, monkeypatch) -> None:
    """No read of a pack for its cover records is much bigger than ``COVER_PIECE`` (it read
    the whole pack, up to 32 MiB)."""
    packs = Packs(tmp_path, PREFIX, 1 << 30)
    wanted = []
    for f in range(40):
        record = encode_cover(f, {"id": f, "len": 50_000, "path": f"p{f}"})
        key = packs.reserve(f, 0, 50_000, len(record))
        packs.write(key, os.urandom(50_000), record)
        wanted.append(key)
    reads = []
    real = os.pread

    def pread(fd, n, offset):
        reads.append(n)
        return real(fd, n, offset)

    monkeypatch.setattr(os, "pread", pread)
    pack = packs.object_of(wanted[0])
    assert [key for key, _ in packs.cover_records(pack)] == wanted
    assert reads and max(reads) < COVER_PIECE + 64
    packs.close()


def test_the_live_sets_bench_runs_every_candidate(tmp_path) -> None:
    """``bench/scale/workspace_live_sets.py`` at 2,000 members: each candidate refuses every
    stale delete and keeps one member a pack (its own asserts), and says what it held."""
    from bench.scale.workspace_live_sets import CANDIDATES, measure

    for candidate in CANDIDATES:
        out = measure(candidate, 2000, 500, str(tmp_path))
        assert {"held_bytes_per_member", "adopt_cpu_us", "delete_cpu_us", "stale_delete_cpu_us"} <= set(out)
