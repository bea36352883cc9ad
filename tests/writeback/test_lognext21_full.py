"""lognext21, 5: an open needs room for its shared-log checkpoint; on a full device.

Every open writes a checkpoint of the journal into the shared tier (``shared_log.attach``). On
a full local tier that write failed with ENOSPC, so the workspace could not be opened at all:
not mounted, and not flushed or evicted either, which is what frees the room. Now each session's
log holds, past its records, as much room as its checkpoint and its records (besides the
records' own reserve), which the next open gives back first and writes its checkpoint into:
the open works, and a flush and an eviction then free the device. Where that room is not there
(a file system without ``fallocate``, a journal from before this log) the open is refused with
``NoSpace`` naming the workspace and what to do, and nothing is lost. A real tmpfs (8 MiB) as
the shared tier, filled to the last block by another file.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.cli.main import main
from datahub.errors import NoSpace
from tests.writeback.conftest import CHUNK, Env, make_env
from tests.writeback.test_nodeloss20 import _files, _put

FILES = {f"d/f{i:03d}": f"file {i} ".encode() * 40 for i in range(150)}


@pytest.fixture
def tier(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "tier"
    root.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "lognext21-full", str(root)], check=True)
    try:
        yield root
    finally:
        subprocess.run(["umount", "-l", str(root)], check=False)


@pytest.fixture
def full_env(tmp_path: Path, tier: Path) -> Iterator[Env]:
    e = make_env(tmp_path / "node", shared_url=tier.as_uri(), writeback_pack_bytes=0)
    yield e
    e.close()


def _fill(tier: Path) -> Path:
    """Another file takes every free block of ``tier``."""
    filler = tier / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        block = b"\0" * (64 * 1024)
        while True:
            try:
                os.write(fd, block)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                if len(block) == 512:
                    break
                block = block[: len(block) // 2]
    finally:
        os.close(fd)
    assert os.statvfs(tier).f_bavail == 0
    return filler


def _written(env: Env) -> None:
    ws = env.open()
    try:
        ws.mkdir("d")
        for path, data in FILES.items():
            _put(ws, path, data)
    finally:
        ws.close()


def test_an_open_on_a_full_shared_tier_writes_its_checkpoint_into_the_room_kept_for_it(
    full_env: Env, tier: Path
) -> None:
    """Before: NoSpace at the open (the checkpoint's first part), and no way to free the tier
    through the workspace."""
    _written(full_env)
    _fill(tier)
    ws = full_env.open()
    try:
        assert _files(ws) == FILES
        ws.flush()
        assert ws.flusher.evict(0) > 0  # what the open makes possible: the tier gets room back
        assert os.statvfs(tier).f_bavail > 0
        _put(ws, "after", b"written once the tier had room again")
    finally:
        ws.close()


def test_without_that_room_the_open_is_refused_with_what_to_do_and_nothing_is_lost(
    full_env: Env, tier: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """A log that kept no room past its records (as on a file system without ``fallocate``):
    the open is refused, NoSpace naming the workspace, the shared tier and what to do; the CLI
    exits 7 with it; once the tier has room, every file is there."""
    _written(full_env)
    for log in tier.glob("writeback-log/ws/j-*/*/log"):
        os.truncate(log, log.stat().st_size)  # no blocks past its records
    filler = _fill(tier)
    with pytest.raises(NoSpace) as err:
        full_env.open()
    message = str(err.value)
    assert "workspace 'ws' cannot be opened" in message and "No space left on device" in message
    assert "forget-journal" in message and "Nothing was lost" in message
    monkeypatch.delenv("DATAHUB_CONFIG", raising=False)
    monkeypatch.setenv("DATAHUB_HOME", str(tmp_path / "node" / "var"))
    monkeypatch.setenv("DATAHUB_CACHE_SHARED_URL", tier.as_uri())
    monkeypatch.setenv("DATAHUB_CACHE_PAGE_SIZE", str(CHUNK))
    monkeypatch.setenv("DATAHUB_CACHE_WRITEBACK_PACK_BYTES", "0")
    assert main(["cache", "flush", "ws"]) == 7
    assert "workspace 'ws' cannot be opened" in capsys.readouterr().err
    filler.unlink()
    ws = full_env.open()
    try:
        assert _files(ws) == FILES
    finally:
        ws.close()
