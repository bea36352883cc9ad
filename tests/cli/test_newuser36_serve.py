"""newuser36: ``datahub serve`` says where it serves only once it does; a home that is a file.

A catalog that would not open (an SQLite path it cannot make, MongoDB unreachable) printed
"datahub API on http://… (…); dataset browser at …; Ctrl-C stops" and the LabelX line, then the
error: a server seemed to run. ``--home FILE`` said "File exists", as if all were well there.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from datahub.cli.main import main
from tests.servers import free_port


def test_serve_whose_catalog_does_not_open_never_says_it_serves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # one catalog that cannot open stands for all (MongoDB unreachable takes its 10 s timeout)
    catalog = "sqlite:////proc/datahub-newuser36/catalog.db"
    code = main(["--home", str(tmp_path / "var"), "--catalog", catalog, "serve", "--port", str(free_port())])
    err = capsys.readouterr().err
    assert code == 7, err
    assert err.startswith("error: open catalog "), err
    assert "datahub API on" not in err and "LabelX on" not in err and "Ctrl-C" not in err, err


def test_a_home_that_is_a_file_is_said_to_be_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "var"
    home.write_text("")
    assert main(["--home", str(home), "init"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"error: cannot create the state directory {home}: it is a file, not a directory; "
        "choose another with --home DIR or $DATAHUB_HOME\n"
    ), err


def test_serve_catalog_without_home_names_the_home_labelx_users_go_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``datahub --catalog URL serve`` printed "users: `datahub --catalog URL labelx create-user
    NAME --role admin`": typed in another directory, that made the user in that directory's
    ./var/labelx.db, which the server never reads (and a line naming ``--home`` dropped the
    ``--catalog``)."""
    import re
    import shlex

    from tests.cli.test_demo import start
    from tests.cli.test_serve_early_signal import EARLY

    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()
    catalog = f"sqlite:///{tmp_path / 'shared' / 'catalog.db'}"
    assert main(["--home", str(tmp_path / "shared"), "init"]) == 0
    proc = start(["-c", EARLY, "--catalog", catalog, "serve", "--port", str(free_port())], here)
    try:
        _, err = proc.communicate(timeout=120)  # a hang guard, never a timing goal
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    shown = re.search(r"users: `([^`]+)`", err)
    assert shown is not None, err
    words = shlex.split(shown[1])
    want = [
        "--catalog",
        catalog,
        "--home",
        str(here / "var"),
        "labelx",
        "create-user",
        "NAME",
        "--role",
        "admin",
    ]
    assert words[-len(want) :] == want, shown[1]
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("LABELX_PASSWORD", "a long enough password")
    assert main([w.replace("NAME", "ann") for w in want]) == 0, capsys.readouterr().err
    assert (here / "var" / "labelx.db").is_file() and not (elsewhere / "var").exists()
