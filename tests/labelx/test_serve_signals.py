"""``datahub labelx serve`` as a real process: SIGTERM and SIGINT stop it cleanly.

A clean stop closes the cache, so the next start trusts the disk tier's index instead of
rebuilding it ("a previous process did not close it"), as after ``datahub serve``.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.cli.test_demo import start, stop
from tests.servers import free_port


def _serve(home: Path, port: int, cwd: Path):
    proc = start(["-m", "datahub.cli.main", "--home", str(home), "labelx", "serve", "--port", str(port)], cwd)
    return wait_answering(proc, f"http://127.0.0.1:{port}")


def wait_answering(proc, url: str):
    """``proc`` once its LabelX at ``url`` answers the login page."""
    deadline = time.monotonic() + 120  # a hang guard, never a timing goal
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"labelx serve exited early with {proc.returncode}:\n{out}\n{err}")
        try:
            if httpx.get(f"{url}/login", timeout=2).status_code < 500:
                return proc
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"labelx serve on {url} did not answer")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_closes_the_cache_so_the_next_start_trusts_its_index(tmp_path: Path, sig: int) -> None:
    home = tmp_path / "var"
    stopped = []
    for _ in range(3):  # the bug showed on every restart, "twice in a row"
        proc = _serve(home, free_port(), tmp_path)
        _, err = stop(proc, sig)
        stopped.append((proc.returncode, err))
    assert list(home.rglob("index")), "the disk tier was not opened, so this test shows nothing"
    for _, err in stopped:
        assert "index rebuilt" not in err and "did not close" not in err, err
    for code, err in stopped:
        assert code == 0 and "stopped" in err and "Traceback" not in err, (code, err)
