"""What ``make run`` tells a new user whose port 8080 is taken: a way to pick another port that
works with ``make run`` itself (which passes no arguments), not only ``--port``."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from datahub.demo import main


def test_a_busy_port_names_a_way_to_move_make_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        code = main(["--home", str(tmp_path / "var"), "--port", str(port), "--no-wait"])
    err = capsys.readouterr().err
    assert code == 4
    assert f"port {port} on 127.0.0.1 is already in use" in err
    assert "DATAHUB_API_PORT=9090 make run" in err  # make run passes no --port
    assert "python -m datahub.demo --port 9090" in err
    assert not (tmp_path / "var").exists()  # checked before any setup
