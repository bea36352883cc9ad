"""A mount point that cannot be reached is not told to ``mkdir -p`` itself (review29).

newuser28 split "mount point X is not a directory: create it first" into "does not exist:
create it first (mkdir -p X)" and "is not a directory" by whether the path exists. A path that
cannot be looked at at all (a file above it: ENOTDIR; a directory above it its user may not
enter: EACCES) took the first answer, and ``mkdir -p`` fails there the same way."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.api.test_audit14 import NOBODY, as_nobody


def test_a_mount_point_under_a_file_says_so_not_to_mkdir_it(tmp_path: Path, capsys) -> None:
    from datahub.cli.main import main

    home = ["--home", str(tmp_path / "var")]
    assert main([*home, "init"]) == 0
    capsys.readouterr()
    under_a_file = tmp_path / "notes.txt" / "mnt"
    under_a_file.parent.write_text("mine\n")
    assert main([*home, "mount", "--background", str(under_a_file), "sample"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: mount point {under_a_file} cannot be reached (Not a directory): "), err
    assert "mkdir -p" not in err  # before: "does not exist: create it first (mkdir -p …)"
    assert under_a_file.parent.read_text() == "mine\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="acting as another user needs root")
def test_a_mount_point_its_user_may_not_reach_says_so_not_to_mkdir_it() -> None:
    from fuse_adapter.daemon import check_mountpoint

    base = Path(tempfile.mkdtemp(prefix="r29-unreachable-", dir="/var/tmp"))
    try:
        base.chmod(0o700)  # root's: nobody may not enter it
        mnt = base / "mnt"
        mnt.mkdir()
        os.chown(mnt, NOBODY, NOBODY)

        def outcome() -> bytes:
            try:
                check_mountpoint(str(mnt))
            except Exception as exc:
                return f"{type(exc).__name__}: {exc}".encode()
            return b"allowed"

        said = as_nobody(outcome).decode()
    finally:
        shutil.rmtree(base)
    assert said.startswith(f"InvalidInput: mount point {mnt} cannot be reached (Permission denied): "), said
    assert "mkdir -p" not in said  # before: "does not exist: create it first (mkdir -p …)"
