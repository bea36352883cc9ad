"""What newuser31 met running ``make run``'s job with a home whose path holds a space.

The demo's summary named the mount as ``Mounted: ls /tmp/my home/mnt/sample/latest (… by hand:
… umount /tmp/my home/mnt)``: typed, ``ls`` listed two paths that do not exist and ``umount``
was given two mount points. The paths are shell-quoted now, as the demo's other commands
(``--home '/tmp/my home'``) already were.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest

from tests.cli.test_demo import start


@pytest.mark.slow
def test_the_demos_mount_commands_are_quoted_for_a_home_with_a_space(tmp_path: Path) -> None:
    if not os.path.exists("/dev/fuse"):
        pytest.skip("no /dev/fuse: the demo skips its mount step")
    home = tmp_path / "my home"
    steps = ["--skip", "listen", "--skip", "serve", "--no-wait"]
    proc = start(["-m", "datahub.demo", "--home", str(home), *steps], tmp_path)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, out + err
    line = next(x for x in out.splitlines() if x.startswith("Mounted: "))
    shown = re.fullmatch(r"Mounted: (.+?)   \(unmounted when the demo stops; by hand: (.+)\)", line)
    assert shown is not None, line
    assert shlex.split(shown[1]) == ["ls", str(home / "mnt" / "sample" / "latest")], line
    by_hand = shlex.split(shown[2])
    assert by_hand[-2:] == ["umount", str(home / "mnt")], line
    assert by_hand[by_hand.index("--home") + 1] == str(home), line
