"""A close refused for space after a rename replaced its file, on a real mount (revertid13):
the revert acts on the handle's own file (by its id), never on the file the rename put at
the path, whose open handle keeps its unsaved writes and whose close keeps every byte.

The race review13 found (the release between the workspace's rename and the view's) is
forced in ``tests/writeback/test_review13.py``; here the rename ends before the close, the
order a program sees, so this checks the path a real daemon takes: the view hands its
handle's file id through, and the replaced file, with no name left, is forsaken and closes
with ENOSPC while the file now at its path is untouched (docs/writeback.md, "Out of space
at close"). It passes on main too (its view skipped a file with no name left); it fails if
the revert goes by a path the file had (tried: the open file's own path), as in review13's
race.
"""

from __future__ import annotations

import os

import pytest

from tests.fuse.conftest import FuseEnv
from tests.fuse.test_workspace_nospace import QUOTA, _close_fails_for_space, _write_all

pytestmark = pytest.mark.fuse


@pytest.mark.parametrize(
    "flags", [[], ["--passthrough"], ["--writeback-cache"]], ids=["default", "passthrough", "writeback-cache"]
)
def test_a_close_refused_for_space_after_a_rename_over_its_file_leaves_the_new_file_whole(
    env: FuseEnv, flags: list[str]
) -> None:
    tag = flags[0].lstrip("-") if flags else "default"
    mnt = env.mountpoint(f"renamed-over-{tag}")
    fresh = os.urandom(100_000)
    with env.mounted(mnt, "--workspace", f"renamed-over-{tag}", "--quota", str(QUOTA), *flags):
        (mnt / "other.bin").write_bytes(b"acknowledged")
        other = os.open(mnt / "other.bin", os.O_WRONLY | os.O_TRUNC)
        assert os.write(other, fresh) == len(fresh)  # not acknowledged until its close
        short = os.open(mnt / "out.bin", os.O_CREAT | os.O_WRONLY, 0o644)
        _write_all(short, os.urandom(2 * QUOTA))  # ENOSPC at a write, or at the close
        os.rename(mnt / "other.bin", mnt / "out.bin")  # replaces the short handle's file
        _close_fails_for_space(short)
        os.close(other)  # returns 0: its bytes must be there
        assert sorted(os.listdir(mnt)) == ["out.bin"]
        assert (mnt / "out.bin").read_bytes() == fresh
