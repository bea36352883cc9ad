"""A refused close whose revert finds no room to write the acknowledged bytes back into the
staged file (docs/writeback.md, "Out of space at close"; ``StagedFile._restore``: the file is
left ``unrestored``, committed by nothing) must still let the handle go at its RELEASE: once
the file is closed everywhere, the next open reads it as the journal holds it.

Before, the RELEASE after that close tried the revert again, which failed the same way and
skipped the handle's close: the open file (its half-restored staged file) stayed until the
unmount, and every later open read it, the acknowledged bytes zeros past what the failed
write had left, while the disk was full and after space came back.

"mapped": a mapping made before the close holds the staged file at the writer's RELEASE, so
the file lingers (``lingering.py``) until it is unmapped, and was then committed whole: an
unrestored file's commit is always refused, so it lingered for ever, retried every second
(the same wrong reads). An unrestored file no longer lingers.

Real mounts, the staging directory on a real 2 MiB tmpfs (``_staging_on``), with
``--passthrough`` (the kernel writes and reads the staged file) and ``--writes-in-c``."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import pytest

from tests.fuse.conftest import FuseEnv, wait_until
from tests.fuse.test_remount import _committed, _staging_on
from tests.fuse.test_workspace_nospace import _close_fails_for_space, _write_all
from tests.writeback import test_faults

pytestmark = pytest.mark.fuse
tiny_fs = test_faults.tiny_fs  # a real 2 MiB tmpfs

FLAGS = {"passthrough": "--passthrough", "writes-in-c": "--writes-in-c"}
SAID = {"passthrough": "writes: passthrough", "writes-in-c": "staged files' WRITEs answered in C"}


def _free(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _reads(path: Path, want: bytes) -> bool:
    return path.read_bytes() == want


@pytest.mark.parametrize("mapped", [False, True], ids=["closed", "mapped"])
@pytest.mark.parametrize("flags", FLAGS)
def test_an_unrestored_file_reads_as_acknowledged_once_closed_everywhere(
    env: FuseEnv, tiny_fs: Path, flags: str, mapped: bool
) -> None:
    name = f"unrestored-{flags}-{int(mapped)}"
    mnt = _staging_on(env, tiny_fs, name)
    old = os.urandom(1_000_000)
    with env.mounted(mnt, "--workspace", name, FLAGS[flags]):
        log = env.root / f"mount-{mnt.name}.log"
        wait_until(lambda: SAID[flags] in log.read_text(), 10)
        (mnt / "f.bin").write_bytes(old)  # acknowledged by its close
        wait_until(lambda: _free(tiny_fs) > 1_500_000, 10)  # its staged file let go (RELEASE)
        ballast = test_faults.fill(tiny_fs, 100_000)
        fd = os.open(mnt / "f.bin", os.O_WRONLY | os.O_TRUNC)  # staged anew, on the full device
        _write_all(fd, os.urandom(3_000_000), fails=True)
        mapping = None
        if mapped:  # a mapping that outlives its descriptor holds the staged file (lingering.py)
            reader = os.open(mnt / "f.bin", os.O_RDONLY)
            mapping = mmap.mmap(reader, 65536, prot=mmap.PROT_READ)
            os.close(reader)
        _close_fails_for_space(fd)  # its revert cannot write the 1 MB back: no blocks left
        assert "to restore its last acknowledged 1,000,000 bytes" in log.read_text()
        if mapping is not None:  # unmapped once the writer's RELEASE found it mapped
            wait_until(
                lambda: "released without a commit" in log.read_text() or "release failed" in log.read_text(),
                10,
            )
            mapping.close()
        # closed everywhere (its RELEASE comes after the close): the journal's bytes, on the
        # full device (main: zeros from about 100 KB on, for as long as the mount ran)
        wait_until(lambda: _reads(mnt / "f.bin", old), 15)
        assert os.stat(mnt / "f.bin").st_size == len(old)
        ballast.unlink()
        assert (mnt / "f.bin").read_bytes() == old
    assert _committed(env, mnt, name, "f.bin") == old
