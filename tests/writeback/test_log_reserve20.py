"""The shared log on a full local shared tier (nodeloss20's log, the lead's fix).

Every change of a workspace's namespace writes a record to the shared log before LMDB commits
it. On a full device the first record failed, the checkpoint that mends the log could not be
written either, and every later change was refused, deletions too: a user could not free space
by removing files, and a close refused for space answered EIO and was never reverted
(``tests/fuse/test_remount.py``). The log's file now holds blocks past its end, taken at the
checkpoint, so an unlink or a rename on a full device still gets its record."""

from __future__ import annotations

from pathlib import Path

from datahub.writeback.shared_log import read_log
from tests.writeback.conftest import CHUNK, LAYOUTS, make_env, write
from tests.writeback.test_faults import fill, fill_up, tiny_fs  # noqa: F401 (the fixture)


def test_an_unlink_and_a_rename_on_a_full_shared_tier_are_journaled_and_survive_a_crash(
    tmp_path: Path,
    tiny_fs: Path,  # noqa: F811
) -> None:
    env = make_env(tmp_path, shared_url=(tiny_fs / "shared").as_uri(), **LAYOUTS["chunk files"])
    try:
        ws = env.open()
        for name in ("a", "b", "c"):
            write(ws, name, name.encode() * (CHUNK + 1))  # several chunks: not a covered commit
        ws.mkdir("tmp")
        for i in range(40):
            write(ws, f"tmp/{i:02d}", b"x")
        before = read_log(ws.chunks)
        assert before is not None
        ballast = fill(tiny_fs, 64_000)
        more = fill_up(tiny_fs)  # the device has no block left
        ws.unlink("a")
        ws.rename("b", "d")
        for i in range(40):  # more records than the slack of the last block (before: NoSpace at the 28th)
            ws.unlink(f"tmp/{i:02d}")
        assert sorted(name for name, _ in ws.listdir()) == ["c", "d", "tmp"]
        after = read_log(ws.chunks)  # what another node would adopt: both changes are in it
        assert after is not None and after.epoch == before.epoch
        assert after.records >= before.records + 42
        # an open writes a new checkpoint, which needs room (docs/writeback.md, "Limits")
        ballast.unlink()
        more.unlink()
        ws2 = env.crash_and_reopen(ws)
        assert sorted(name for name, _ in ws2.listdir()) == ["c", "d", "tmp"]
        assert ws2.listdir("tmp") == []
        with ws2.open("d") as fh:
            assert fh.read(0, 2 * CHUNK + 2) == b"b" * (CHUNK + 1)
    finally:
        env.close()
