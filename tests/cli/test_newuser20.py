"""newuser20: what a new user met in the demo and the command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from datahub import demo
from tests.servers import free_port
from tests.tmpfs import small_tmpfs


def test_make_run_on_a_full_disk_says_so_and_what_to_do_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``make run`` with its home on a full file system showed Python's traceback of an
    ``OSError: [Errno 28]`` from the sample step; now one line names the step, the file
    system's state and the fix (another home, or free space)."""
    with small_tmpfs(tmp_path / "tiny", "256k") as home:
        args = [
            "--home",
            str(home),
            "--port",
            str(free_port()),
            "--no-wait",
            "--skip",
            "mount",
            "--skip",
            "serve",
        ]
        code = demo.main(args)
    err = capsys.readouterr().err
    assert code == 7, err
    assert "Traceback" not in err
    assert "error: make run's step 'sample' failed: no space left on device" in err
    assert str(home) in err and "DATAHUB_HOME=DIR make run" in err
