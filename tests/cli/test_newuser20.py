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


def test_a_catalog_url_with_a_wrong_path_says_to_give_the_servers_root(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--catalog http://host:8080/labelx`` (or any path the server has no API under) was
    reported as a missing thing, exit 3: "no such endpoint: GET /wrong/v1/datasets", "Not
    Found: GET /labelx/v1/datasets", which said neither that the URL was wrong nor what to
    give instead."""
    from datahub.cli.main import main
    from tests.catalog.remote import serve

    server, backing, token = serve(tmp_path / "server")
    monkeypatch.setenv("DATAHUB_API_TOKEN", token)
    try:
        for path in ("/wrong", "/labelx"):
            url = f"{server.url}{path}"
            code = main(["--home", str(tmp_path / "home"), "--catalog", url, "dataset", "list"])
            err = capsys.readouterr().err
            assert code == 7, err
            assert f"the catalog server {url} has no datahub API at {path}/v1/datasets" in err, err
            assert f"catalog_url must be the API server's root (such as {server.url})" in err, err
        assert main(["--home", str(tmp_path / "home"), "--catalog", server.url, "dataset", "list"]) == 0
    finally:
        server.stop()
        backing.close()


def test_closing_the_terminal_of_make_run_stops_it_cleanly(tmp_path: Path) -> None:
    """Closing the terminal sends SIGHUP, whose default killed the demo at once: no cleanup, so
    its mount daemon (a session of its own) stayed mounted at var/mnt after the demo was gone.
    SIGHUP now stops it as Ctrl-C does (the cleanup that unmounts; tests/cli/test_demo.py
    checks that the Ctrl-C path leaves nothing mounted)."""
    import signal

    from tests.cli.test_demo import start, stop, wait_healthy

    port = free_port()
    skip = ["--skip", "sample", "--skip", "import", "--skip", "mount"]
    proc = start(
        ["-m", "datahub.demo", "--home", str(tmp_path / "var"), "--port", str(port), *skip], tmp_path
    )
    wait_healthy(proc, f"http://127.0.0.1:{port}")
    out, err = stop(proc, signal.SIGHUP)
    assert proc.returncode == 0, (proc.returncode, err)
    assert "demo stopped cleanly" in out


@pytest.mark.parametrize("command", [["serve"], ["labelx", "serve"]], ids=["serve", "labelx-serve"])
def test_closing_the_terminal_of_a_server_stops_it_cleanly(tmp_path: Path, command: list[str]) -> None:
    """``datahub serve`` and ``datahub labelx serve`` in a terminal: closing it (SIGHUP) killed
    them at once, the cache never closed (the next start rebuilt the disk tier's index)."""
    import signal

    from tests.cli.test_demo import start, stop
    from tests.labelx.test_serve_signals import wait_answering

    port = free_port()
    args = ["-m", "datahub.cli.main", "--home", str(tmp_path / "var"), *command, "--port", str(port)]
    proc = wait_answering(
        start(args, tmp_path), f"http://127.0.0.1:{port}" + ("/labelx" if command == ["serve"] else "")
    )
    out, err = stop(proc, signal.SIGHUP)
    assert proc.returncode == 0, (proc.returncode, err)
    assert err.rstrip().endswith("stopped"), err


def test_export_o_writes_through_a_fifo_or_symlink_never_replacing_it(tmp_path: Path) -> None:
    """``datahub export DS -o /dev/stdout`` (or a FIFO, a device, a symlink) wrote a temporary
    file beside the path and renamed it over it: as root, /dev/stdout (a symlink) or /dev/full
    (a device) became a regular file holding the export, and a FIFO's reader got nothing. A
    path that is not a regular file is written as ``>`` would; through a symlink, its target
    is replaced (atomically, as before) and the link stays."""
    import os
    import stat

    from datahub.cli.main import main

    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("a")
    (src / "b.txt").write_text("bb")
    home = ["--home", str(tmp_path / "home")]
    assert main([*home, "import", str(src), "--to", "ds"]) == 0

    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader is there: the export's open goes on
    try:
        assert main([*home, "export", "ds@v1", "-o", str(fifo)]) == 0
        assert stat.S_ISFIFO(os.lstat(fifo).st_mode), "the FIFO was replaced by a regular file"
        got = os.read(reader, 1 << 16).decode()
    finally:
        os.close(reader)
    assert [line.split('"key":"')[1].split('"')[0] for line in got.splitlines()] == ["a.txt", "b.txt"]

    real = tmp_path / "real.ndjson"
    real.write_text("old\n")
    link = tmp_path / "link.ndjson"
    link.symlink_to(real)
    assert main([*home, "export", "ds@v1", "-o", str(link)]) == 0
    assert link.is_symlink() and len(real.read_text().splitlines()) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "home",
        "link.ndjson",
        "out.fifo",
        "real.ndjson",
        "src",
    ]
