"""The tests' moto servers end with the process that started them (tests/moto_launch.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.moto_launch import MOTO_SERVER
from tests.servers import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HTTP11 = [sys.executable, os.path.join(os.path.dirname(__file__), "moto_http11.py")]


@pytest.mark.parametrize("launcher", [MOTO_SERVER, HTTP11], ids=["moto_server", "http11"])
def test_a_server_whose_starter_died_without_teardown_exits(launcher, tmp_path):
    port = free_port()
    pidfile = tmp_path / "pid"
    starter = (
        "import subprocess, sys\n"
        "from tests.servers import wait_for_port\n"
        f"p = subprocess.Popen({[*launcher, '-H', '127.0.0.1', '-p', str(port)]!r}, "
        "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        f"wait_for_port({port})\n"  # as a fixture does: the server is up and serving
    )
    # the starter exits at once, as a killed xdist worker does: nobody tears the server down
    subprocess.run([sys.executable, "-c", starter], check=True, cwd=ROOT)
    server = int(pidfile.read_text())
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                os.kill(server, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        else:
            pytest.fail(f"moto server {server} outlived its starter by 60 s")
    finally:
        try:
            os.kill(server, 9)
        except ProcessLookupError:
            pass
