"""Cover records: a new small file's first commit also goes into its pack, beside the chunk,
so the journal commit flushes no meta page of its own (datahub/writeback/journal.py).

What a power loss does to the journal is simulated with LMDB's own copy of the environment
taken before the last transaction: the file as the disk held it when that transaction's meta
page was never flushed; the journal's owner boot is then set to another boot, as after a
reboot. A process kill needs no simulation: the existing crash tests (test_crash.py) kill
writers during first commits, and nothing is lost there because the meta page was written
before the commit returned.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from datahub.writeback.journal import OWNER_BOOT, Journal
from tests.writeback.conftest import Env, make_env, write


def _journal_dir(env: Env) -> Path:
    return env.config.resolved_journal_dir / "workspaces" / "ws" / "lmdb"


def _another_boot(lmdb_dir: Path, data_mdb: Path | None = None) -> None:
    """The machine booted since the journal's owner died (and, with ``data_mdb``, the journal
    lost what was written after that copy)."""
    if data_mdb is not None:
        shutil.copyfile(data_mdb, lmdb_dir / "data.mdb")
    journal = Journal(lmdb_dir, "a journal after a power loss")
    try:
        with journal.write("a reboot") as txn:
            txn.put_meta(OWNER_BOOT, "a boot before this one")
    finally:
        journal.close()


def _in_journal(lmdb_dir: Path, path: str) -> bool:
    journal = Journal(lmdb_dir, "a journal after a power loss", readonly=True)
    try:
        with journal.read() as txn:
            return txn.entry(path) is not None
    finally:
        journal.close()


def test_a_first_close_a_power_loss_took_from_the_journal_is_written_again_from_its_pack(
    tmp_path: Path,
) -> None:
    env = make_env(tmp_path)  # packs
    try:
        ws = env.open()
        write(ws, "keep", b"k" * 300)
        ws.mkdir("d")
        before = tmp_path / "journal-before"
        before.mkdir()
        ws.journal._env.copy(str(before))  # the journal on disk before the next transaction
        payload = bytes(range(256)) * 15  # one chunk (CHUNK is 4096): a covered first commit
        write(ws, "d/new", payload)  # acknowledged: its close returned
        ((key, _),) = ws.journal_record("d/new")["chunks"].values()
        assert ws.chunks.packed(key)
        ws.abandon()  # the process dies with the machine
        lmdb_dir = _journal_dir(env)
        _another_boot(lmdb_dir, before / "data.mdb")
        assert not _in_journal(lmdb_dir, "d/new")  # the power loss took its commit

        ws2 = env.open()
        assert [name for name, _ in ws2.listdir("d")] == ["new"]
        with ws2.open("d/new") as fh:
            assert fh.read(0, 20000) == payload
        with ws2.open("keep") as fh:
            assert fh.read(0, 400) == b"k" * 300
        assert "unverified" not in ws2.journal_record("d/new")  # its chunk was checked (CRC)
        assert "d/new" in ws2.dirty()  # and it goes to the origin like any acknowledged file
        ws2.close()
        ws3 = env.open()  # a clean close: nothing is looked for or replayed again
        assert [name for name, _ in ws3.listdir("d")] == ["new"] and ws3.stat("d/new").size == len(payload)
    finally:
        env.close()


def test_files_unlinked_or_renamed_after_their_first_close_are_not_brought_back(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    try:
        ws = env.open()
        write(ws, "keep", b"k" * 300)  # keeps the pack (and the records in it) alive
        write(ws, "gone", b"g" * 300)
        write(ws, "moved", b"m" * 300)
        ws.unlink("gone")
        ws.rename("moved", "there")
        ws.abandon()
        _another_boot(_journal_dir(env))  # a power loss that took nothing (the last commits were flushed)

        ws2 = env.open()
        assert [name for name, _ in ws2.listdir("")] == ["keep", "there"]
        with ws2.open("there") as fh:
            assert fh.read(0, 400) == b"m" * 300
    finally:
        env.close()


def test_a_torn_pack_record_is_not_replayed(tmp_path: Path) -> None:
    """A record whose bytes did not all land (the power loss came mid-append: its close never
    returned) fails its CRC; the file stays lost, as POSIX allows."""
    env = make_env(tmp_path)
    try:
        ws = env.open()
        write(ws, "keep", b"k" * 300)
        before = tmp_path / "journal-before"
        before.mkdir()
        ws.journal._env.copy(str(before))
        write(ws, "torn", b"t" * 300)
        key = next(iter(ws.journal_record("torn")["chunks"].values()))[0]
        pack, offset = ws.chunks._packs.path_of(key)
        ws.abandon()
        with open(pack, "r+b") as fh:  # the last bytes of its record never reached the disk
            fh.seek(0, 2)
            end = fh.tell()
            fh.truncate(end - 5)
        assert end > offset + 300
        _another_boot(_journal_dir(env), before / "data.mdb")

        ws2 = env.open()
        assert [name for name, _ in ws2.listdir("")] == ["keep"]
    finally:
        env.close()
