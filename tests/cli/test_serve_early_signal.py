"""A stop signal that arrives as soon as the server answers stops it cleanly.

``datahub serve`` and ``datahub labelx serve`` started the server (``/healthz`` and the login
page answer at once) and only then installed their SIGTERM/SIGINT handlers, so a supervisor's
or a test's SIGTERM in that gap killed the process (exit -15) with its cache never closed; two
tests were flaky under load for it (newuser11's finding). Here the signal comes at the
earliest moment, deterministically: the server's ``start`` sends it to its own process the
moment it returns.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.cli.test_demo import start
from tests.servers import free_port

EARLY = """
import os, signal, sys
from datahub.api import server

started = server.ApiServer.start


def start_then_stop(self):
    started(self)
    os.kill(os.getpid(), signal.SIGTERM)  # what a supervisor may do once /healthz answers


server.ApiServer.start = start_then_stop
from datahub.cli.main import main

sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("command", [["serve"], ["labelx", "serve"]], ids=["serve", "labelx-serve"])
def test_a_sigterm_right_after_the_server_starts_stops_it_cleanly(tmp_path: Path, command: list[str]) -> None:
    home = tmp_path / "var"
    proc = start(["-c", EARLY, "--home", str(home), *command, "--port", str(free_port())], tmp_path)
    try:
        _, err = proc.communicate(timeout=120)  # a hang guard, never a timing goal
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, (proc.returncode, err)
    assert "stopped" in err or command == ["serve"], err
    assert "Traceback" not in err, err
    assert proc.returncode != -signal.SIGTERM
