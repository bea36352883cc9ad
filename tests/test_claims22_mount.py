"""A name over 255 bytes in a workspace mount is ENAMETOOLONG, as docs/semantics.md says (claims22).

The kernel hands FUSE names of up to 1,024 bytes (FUSE_NAME_MAX), so the daemon decides: the
workspace refuses a name over NAME_MAX (its flush could never store it, probe21), and that
refusal reached the caller as EINVAL ("Invalid argument"), which says nothing of the length;
a local file system answers ENAMETOOLONG ("File name too long"). A real mount, through the
CLI on a fresh home (objects on local disk), mounted once for the whole file.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="needs /dev/fuse"),
]


def test_a_name_over_255_bytes_is_enametoolong_and_255_is_taken(tmp_path: Path) -> None:
    datahub = Path(sys.executable).parent / "datahub"
    env = {"PATH": f"{datahub.parent}:/usr/bin:/bin", "HOME": str(tmp_path)}
    mnt = tmp_path / "mnt"
    mnt.mkdir()

    def cli(*argv: str) -> None:
        done = subprocess.run(
            [datahub, "--home", "home", *argv],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr

    cli("init")
    cli("mount", "--background", "--workspace", "long", str(mnt), "--commit-to", "out")
    try:
        for make in (lambda p: open(p, "w").close(), os.mkdir):
            with pytest.raises(OSError) as caught:
                make(mnt / ("x" * 256))
            assert caught.value.errno == errno.ENAMETOOLONG, caught.value
        (mnt / "kept.txt").write_text("kept\n")
        with pytest.raises(OSError) as caught:
            os.rename(mnt / "kept.txt", mnt / ("é" * 128))  # 256 bytes in UTF-8
        assert caught.value.errno == errno.ENAMETOOLONG, caught.value
        (mnt / ("m" * 255)).write_text("at the limit\n")
    finally:
        cli("umount", str(mnt))
    listed = subprocess.run(
        [datahub, "--home", "home", "ls", "out"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert sorted(line.split()[0] for line in listed.stdout.splitlines()) == ["kept.txt", "m" * 255], listed
