"""Pack files: small chunks appended to shared files of a local shared tier (packs.py).

What must hold: every chunk reads back exactly, after a crash too; a pack is deleted when
its last live chunk is, and never before; a journal written with packs stays readable
when packing is switched off; concurrent appends never overlap; a failed append gives its
range up and loses nothing acknowledged.
"""

from __future__ import annotations

import errno
import hashlib
import os
import random
import subprocess
import threading
from pathlib import Path

import pytest

from datahub.errors import NoSpace
from datahub.storage.local import LocalStore
from datahub.writeback.chunks import ChunkStore, file_id_of
from datahub.writeback.packs import PACK_CHUNK_MAX, Packs
from tests.writeback.conftest import CHUNK, Env, make_env, objects_of, write


def read(ws, path: str) -> bytes:
    with ws.open(path) as fh:
        return fh.read(0, ws.stat(path).size + 1)


def referenced(ws) -> set[str]:
    with ws.journal.read() as txn:
        return {k for _, rec in txn.files() for k, _ in rec["chunks"].values()}


def full_once(monkeypatch, method: str) -> None:
    """``Packs.<method>`` fails once with ENOSPC (the device is full), then works again."""
    real, calls = getattr(Packs, method), []

    def patched(self, *args):
        calls.append(args)
        if len(calls) == 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, *args)

    monkeypatch.setattr(Packs, method, patched)


@pytest.fixture
def packed(tmp_path: Path):
    e = make_env(tmp_path, writeback_pack_bytes=8 * CHUNK)  # small packs: several per test
    yield e
    e.close()


def test_small_files_share_packs_and_read_back_after_a_crash(packed: Env) -> None:
    ws = packed.open()
    rng = random.Random(7)
    files = {f"f{i}": rng.randbytes(rng.randrange(1, 3 * CHUNK)) for i in range(12)}
    for path, data in files.items():
        write(ws, path, data)
    keys = referenced(ws)
    assert all("/packs/" in key for key in keys)
    assert len(set(packed.shared_keys())) < len(keys)  # many chunks per object
    assert set(packed.shared_keys()) == objects_of(ws, keys)
    assert all(file_id_of(key) >= 0 for key in keys)  # the flusher finds each chunk's file
    for path, data in files.items():
        assert read(ws, path) == data
    ws = packed.crash_and_reopen(ws)
    for path, data in files.items():
        assert read(ws, path) == data
    ws.flush()
    assert packed.origin_files() == {p: hashlib.sha256(d).hexdigest() for p, d in files.items()}


def test_a_pack_lives_exactly_as_long_as_one_of_its_chunks(packed: Env) -> None:
    ws = packed.open()
    for i in range(10):
        write(ws, f"f{i}", os.urandom(CHUNK))  # one chunk each: 8 per pack
    assert len(packed.shared_keys()) == 2
    for i in range(1, 10):
        if i != 3:
            ws.unlink(f"f{i}")
    ws.flusher.gc()
    # f0 and f3 share the first pack, which therefore stays; the second pack died with f8, f9
    assert set(packed.shared_keys()) == objects_of(ws, referenced(ws))
    assert len(packed.shared_keys()) == 1
    ws.unlink("f0")
    ws.flusher.gc()
    assert len(packed.shared_keys()) == 1  # f3 still lives in it
    assert read(ws, "f3") and ws.stat("f3").size == CHUNK
    ws.unlink("f3")
    ws.flusher.gc()
    assert packed.shared_keys() == []
    write(ws, "again", b"new pack")  # a dead pack is never appended to again
    assert read(ws, "again") == b"new pack"
    assert len(packed.shared_keys()) == 1


def test_overwrites_give_old_ranges_up_and_packs_roll_over(packed: Env) -> None:
    ws = packed.open()
    for round_ in range(5):
        write(ws, "f", bytes([round_]) * (3 * CHUNK))
        ws.flusher.gc()
        assert set(packed.shared_keys()) == objects_of(ws, referenced(ws))
    assert read(ws, "f") == bytes([4]) * (3 * CHUNK)
    root = Path(packed.config.resolved_shared_url.removeprefix("file://"))
    for key in packed.shared_keys():
        assert (root / key).stat().st_size <= 8 * CHUNK


def test_a_journal_written_with_packs_reads_back_with_packing_off(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    ws = env.open()
    write(ws, "packed", b"p" * (2 * CHUNK + 1))
    ws.abandon()
    env.close()
    env = make_env(tmp_path, writeback_pack_bytes=0)
    try:
        ws = env.open()  # recovery must keep the packs the journal references
        assert read(ws, "packed") == b"p" * (2 * CHUNK + 1)
        write(ws, "plain", b"q" * 10)
        assert all("/packs/" not in k for k, _ in ws.journal_record("plain")["chunks"].values())
        ws.unlink("packed")
        # the background flusher may be uploading the recovered "packed" now, which pins its
        # chunks against gc (they go at the next gc); a flush waits for it to end
        ws.flush()
        ws.flusher.gc()
        assert set(env.shared_keys()) == objects_of(ws, referenced(ws))  # its pack went with it
        ws.flush()
        assert env.origin_files() == {"plain": hashlib.sha256(b"q" * 10).hexdigest()}
    finally:
        env.close()


def test_concurrent_writers_append_without_overlap(packed: Env) -> None:
    ws = packed.open()
    files = {f"t{t}/f{i}": random.Random(t * 100 + i).randbytes(1 + (t * 977 + i * 131) % (2 * CHUNK))
             for t in range(6) for i in range(15)}  # fmt: skip
    for t in range(6):
        ws.mkdir(f"t{t}")
    errors: list[BaseException] = []

    def writer(t: int) -> None:
        try:
            for path, data in files.items():
                if path.startswith(f"t{t}/"):
                    write(ws, path, data)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    ws = packed.crash_and_reopen(ws)
    for path, data in files.items():
        assert read(ws, path) == data, path


def test_a_failed_append_raises_nospace_gives_its_range_up_and_a_retry_succeeds(
    packed: Env, monkeypatch
) -> None:
    ws = packed.open()
    write(ws, "kept", b"k" * 100)
    full_once(monkeypatch, "write")
    fh = ws.open("new", create=True)
    fh.write(0, b"n" * 100)
    with pytest.raises(NoSpace) as info:
        fh.close()
    assert "'new'" in info.value.message and "shared tier" in info.value.message
    assert ws.journal_record("new") == {}  # nothing of it was acknowledged
    fh.close()  # the handle stayed open with its data: the retry appends again
    assert read(ws, "new") == b"n" * 100 and read(ws, "kept") == b"k" * 100
    ws = packed.crash_and_reopen(ws)
    assert read(ws, "new") == b"n" * 100 and read(ws, "kept") == b"k" * 100
    assert set(packed.shared_keys()) == objects_of(ws, referenced(ws))


def test_chunk_store_packs_only_small_chunks(tmp_path: Path) -> None:
    store = ChunkStore(LocalStore(tmp_path / "root"), "writeback/ws", "workspace 'ws'", pack_bytes=1 << 24)
    try:
        big = store.put(5, 0, os.urandom(PACK_CHUNK_MAX), "f")
        small = store.put(5, 1, b"tail", "f")
        assert "/packs/" not in big and store.object_of(big) == big
        assert "/packs/" in small and store.object_of(small) != small
        assert file_id_of(big) == file_id_of(small) == 5
        assert store.get(small, 4, "f") == b"tail"
        assert store.locate(small) == (store.object_of(small), 0)
    finally:
        store.close()


def test_a_pack_whose_last_chunk_dies_mid_append_goes_when_the_append_ends(tmp_path: Path) -> None:
    packs = Packs(tmp_path, "writeback/ws", 1 << 20)
    try:
        key = packs.reserve(1, 0, 5)
        pack_file, offset = packs.path_of(key)
        assert offset == 0 and pack_file.exists()
        packs.delete(key)  # its last chunk is given up while its append is in flight
        assert pack_file.exists()
        packs.write(key, b"hello")
        assert not pack_file.exists()
        again = packs.reserve(1, 1, 3)
        assert packs.path_of(again)[0] != pack_file  # a new pack, never the dead one
    finally:
        packs.close()


def test_a_pack_that_cannot_be_created_is_nospace_naming_the_file(packed: Env, monkeypatch) -> None:
    ws = packed.open()
    full_once(monkeypatch, "_new_pack")
    fh = ws.open("first", create=True)
    fh.write(0, b"f" * 100)
    with pytest.raises(NoSpace) as info:
        fh.close()
    assert "'first'" in info.value.message and "free space" in info.value.message
    assert ws.journal_record("first") == {}
    fh.close()  # space is back: the retry creates the pack
    assert read(ws, "first") == b"f" * 100


class _FlakyDisk:
    """A directory on ext2 on a loop device whose backing file lives on a small tmpfs: filling
    the tmpfs makes every write-back to blocks not allocated yet fail (a device error, as the
    kernel sees it); emptying it ends the fault. A real transient device fault, no mock."""

    def __init__(self, base: Path) -> None:
        self.tmpfs, self.root = base / "tmpfs", base / "ext2"
        self.tmpfs.mkdir()
        self.root.mkdir()

    def mount(self) -> str | None:
        """Mounted, or why not."""
        run = subprocess.run
        if run(
            ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(self.tmpfs)], capture_output=True
        ).returncode:
            return "cannot mount a tmpfs here"
        image = self.tmpfs / "disk.img"
        with open(image, "wb") as f:
            f.truncate(64 << 20)  # sparse: its blocks are taken from the tmpfs as written
        made = run(["mkfs.ext2", "-q", "-F", str(image)], capture_output=True, text=True)
        if (
            made.returncode
            or run(
                ["mount", "-o", "loop,errors=continue", str(image), str(self.root)], capture_output=True
            ).returncode
        ):
            return f"cannot mount an ext2 image here: {made.stderr.strip() or 'mount -o loop failed'}"
        return None

    def fail(self) -> None:
        with open(self.tmpfs / "filler", "wb") as f:
            try:
                while True:
                    f.write(bytes(1 << 20))
                    f.flush()
            except OSError as exc:
                assert exc.errno == errno.ENOSPC

    def heal(self) -> None:
        (self.tmpfs / "filler").unlink(missing_ok=True)

    def unmount(self) -> None:
        for target in (self.root, self.tmpfs):  # lazily if a descriptor still holds it
            if subprocess.run(["umount", str(target)], capture_output=True).returncode:
                subprocess.run(["umount", "-l", str(target)], capture_output=True)


@pytest.fixture
def flaky_disk(tmp_path: Path):
    disk = _FlakyDisk(tmp_path)
    why = disk.mount()
    if why:
        disk.unmount()
        pytest.skip(why)
    try:
        yield disk
    finally:
        disk.unmount()


def test_an_append_whose_bytes_a_failed_flush_lost_is_never_acknowledged(flaky_disk, monkeypatch) -> None:
    """Two appends share the pack's descriptor; both are written, the device fails, the
    first one's ``fdatasync`` gets the error and the fault ends. Linux reports a write-back
    error once per open file, so the second one's ``fdatasync`` would find its (lost) pages
    clean and return 0: its close acknowledged, its bytes zeros on disk. Every append that
    returns must read back from the disk; both fail here."""
    packs = Packs(flaky_disk.root, "ws/chunks", 1 << 20)
    data = {"A": b"a" * 100_000, "B": b"b" * 100_000}
    keys = {who: packs.reserve(i + 1, 0, len(data[who])) for i, who in enumerate(data)}
    b_written, a_done = threading.Event(), threading.Event()
    real_pwrite = os.pwrite

    def pwrite(fd: int, buf, offset: int) -> int:
        n = real_pwrite(fd, buf, offset)
        if threading.current_thread().name == "A":
            assert b_written.wait(30)  # both appends are in the page cache before any flush
        elif threading.current_thread().name == "B":
            flaky_disk.fail()
            b_written.set()
            assert a_done.wait(30)  # A's flush has met the fault
            flaky_disk.heal()  # transient: B's own flush would find nothing left to fail
        return n

    monkeypatch.setattr(os, "pwrite", pwrite)
    outcome: dict[str, BaseException | None] = {}

    def append(who: str) -> None:
        try:
            packs.write(keys[who], data[who])
            outcome[who] = None
        except BaseException as exc:
            outcome[who] = exc
        finally:
            if who == "A":
                a_done.set()

    threads = [threading.Thread(target=append, args=(who,), name=who) for who in data]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    monkeypatch.undo()
    assert isinstance(outcome["A"], OSError), outcome  # the fault reached the first flush
    path, _ = packs.path_of(keys["A"])
    for who, failed in outcome.items():
        if failed is None:  # acknowledged: its bytes must be on the disk
            _, offset = packs.path_of(keys[who])
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                assert os.pread(fd, len(data[who]), offset) == data[who], f"{who} acknowledged, bytes lost"
            finally:
                os.close(fd)
    assert isinstance(outcome["B"], OSError) and "earlier flush" in str(outcome["B"]), outcome
    # the pack is sealed: the next append goes to a new pack, on the healed disk, and holds
    key = packs.reserve(3, 0, 10)
    assert packs.path_of(key)[0] != path
    packs.write(key, b"c" * 10)
    packs.close()
