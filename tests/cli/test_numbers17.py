"""Numbers out of range are refused where argparse reads them, in words, exit 2 (newuser17).

``datahub mount … --threads -1`` ended in "this is a datahub bug", ``--threads 0`` and
``--uid -5`` mounted, ``datahub pack … --lease -1`` was accepted and ``--workers -1`` ran as 0.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from datahub.cli.main import main


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["mount", "MNT", "demo", "--threads", "-1"], "argument --threads: -1: use a number >= 1"),
        (["mount", "MNT", "demo", "--threads", "0"], "argument --threads: 0: use a number >= 1"),
        (["mount", "MNT", "demo", "--uid", "-5"], "argument --uid: -5: use a number >= 0"),
        (["mount", "MNT", "demo", "--gid", "x"], "argument --gid: 'x' is not a whole number"),
        # newuser20b: mounted, then every stat failed with EIO (it does not fit a uid_t)
        (["mount", "MNT", "demo", "--uid", "4294967296"], "a Linux user or group id is 0 to 4294967294"),
        (["mount", "MNT", "demo", "--gid", "4294967295"], "a Linux user or group id is 0 to 4294967294"),
        (["pack", "demo", "--to", "x", "--resize", "16x16", "--lease", "-1"], "use a number of seconds > 0"),
        (["pack", "demo", "--to", "x", "--resize", "16x16", "--lease", "nan"], "use a number of seconds > 0"),
        (["pack", "demo", "--to", "x", "--resize", "16x16", "--workers", "-1"], "use a number >= 0"),
        (["pack-worker", "--job", "1", "--lease", "0"], "use a number of seconds > 0"),
    ],
)
def test_a_number_out_of_range_is_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    home = tmp_path / "home"
    args = [str(tmp_path / "mnt") if a == "MNT" else a for a in args]
    with pytest.raises(SystemExit) as exc:
        main(["--home", str(home), *args])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert said in err and "datahub bug" not in err and "Traceback" not in err
    assert not home.exists()  # nothing was made


def test_the_mount_command_itself_refuses_threads_below_one(tmp_path: Path) -> None:
    """The same through the real command, as a user types it."""
    r = subprocess.run(
        [str(Path(sys.executable).parent / "datahub"), "--home", str(tmp_path / "home"), "mount", str(tmp_path), "demo",
         "--threads", "-1"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 2, r
    assert "argument --threads: -1: use a number >= 1" in r.stderr and "datahub bug" not in r.stderr


def test_an_empty_author_is_refused_before_mounting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--author ""`` was committed as an empty author by a live daemon, but as the umount
    runner's login name at a recovery (the mount record keeps "" for "not given")."""
    home = tmp_path / "home"
    mnt = tmp_path / "mnt"
    args = ["--home", str(home), "mount", "--workspace", "w", str(mnt), "--commit-to", "d", "--author", " "]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "--author is empty" in err and "datahub bug" not in err
    assert not mnt.exists() or not any(mnt.iterdir())
