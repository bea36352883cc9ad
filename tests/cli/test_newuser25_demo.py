"""A second ``make run`` demo in the home of a running one refuses, naming the running one and
what to do, and leaves it alone (newuser25).

Before, the second demo's mount step took the first one's live mount at ``<home>/mnt`` for a
killed demo's leftover and unmounted it: the first demo's mount was gone under its users while
it went on serving and printing "Mounted: ls …".
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal
import socket
from pathlib import Path

import httpx
import pytest

from datahub.config import load_config
from datahub.demo import DEMO_LOCK, Demo, claim_home, running_demo
from datahub.errors import Conflict
from fuse_adapter.daemon import is_mounted
from tests.cli.test_demo import start, stop, wait_healthy
from tests.servers import free_port


@pytest.mark.slow
def test_a_second_demo_in_the_same_home_refuses_and_leaves_the_first_ones_mount(tmp_path: Path) -> None:
    home, port, other = tmp_path / "var", free_port(), free_port()
    url = f"http://127.0.0.1:{port}"
    first = start(["-m", "datahub.demo", "--home", str(home), "--port", str(port)], tmp_path)
    try:
        wait_healthy(first, url, timeout=300.0)  # its mount step runs three epochs first
        fuse = os.path.exists("/dev/fuse")
        mnt = home / "mnt"
        if fuse:
            assert is_mounted(str(mnt))
        # another port (the busy port's message says how), and the same port: both name the first demo
        for again in (other, port):
            second = start(
                ["-m", "datahub.demo", "--home", str(home), "--port", str(again), "--no-wait"], tmp_path
            )
            out, err = second.communicate(timeout=300)
            assert second.returncode == 4, out + err
            assert (
                f"error: a demo is already running in {home} (process {first.pid}, serving {url}/)" in err
            ), err
            assert "kill " + str(first.pid) in err and "DATAHUB_HOME=DIR make run" in err, err
            assert "Traceback" not in err and "[sample]" not in err, err
            # the first demo is untouched: still mounted, still serving, its lock still there
            if fuse:
                assert is_mounted(str(mnt)) and len(list((mnt / "sample" / "latest").rglob("*.jpg"))) == 300
            assert httpx.get(f"{url}/healthz", timeout=10).status_code == 200
            assert (home / DEMO_LOCK).exists()
    finally:
        out, err = stop(first, signal.SIGINT)
    assert first.returncode == 0, err
    assert not is_mounted(str(home / "mnt"))
    assert not (home / DEMO_LOCK).exists()  # nothing left behind
    # once it stopped, a demo runs in that home again
    quick = ["--home", str(home), "--no-wait", "--skip", "listen", "--skip", "mount", "--skip", "serve"]
    again = start(["-m", "datahub.demo", *quick], tmp_path)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0 and "sample exists (latest v1" in err, err


def _demo(home: Path, skip: list[str] | None = None) -> Demo:
    return Demo(
        load_config(None, overrides={"home": str(home)}), argparse.Namespace(skip=skip or [], config=None)
    )


def test_the_lock_of_a_killed_demo_does_not_hold_the_home(tmp_path: Path) -> None:
    """A demo killed with SIGKILL leaves its lock file, unheld: the next demo runs (and cleans
    up the killed one's mount, as before)."""
    home = tmp_path / "var"
    home.mkdir()
    (home / DEMO_LOCK).write_text(json.dumps({"pid": 999999, "url": "http://127.0.0.1:1/"}) + "\n")
    assert running_demo(home) is None
    demo = _demo(home)
    with demo.cleanup:
        claim_home(demo)
        held = running_demo(home)
        assert held == {"pid": os.getpid(), "url": f"http://127.0.0.1:{demo.config.api.port}/"}
    assert not (home / DEMO_LOCK).exists() and running_demo(home) is None
    assert running_demo(tmp_path / "nowhere") is None  # a probe creates nothing
    assert not (tmp_path / "nowhere").exists()


def test_a_held_home_is_refused_with_the_holders_pid(tmp_path: Path) -> None:
    home = tmp_path / "var"
    home.mkdir()
    fd = os.open(home / DEMO_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, json.dumps({"pid": 4242, "url": None}).encode())
        demo = _demo(home, skip=["serve"])
        with pytest.raises(Conflict) as caught, demo.cleanup:
            claim_home(demo)
        assert f"a demo is already running in {home} (process 4242)" in caught.value.message
        assert "kill 4242" in caught.value.message and caught.value.exit_code == 4
    finally:
        os.close(fd)


def test_the_lock_names_the_port_the_demo_bound(tmp_path: Path) -> None:
    """``--port 0`` (the kernel picks one): the refusal of a second demo named ``:0``."""
    home = tmp_path / "var"
    home.mkdir()
    demo = _demo(home)
    with socket.socket() as bound, demo.cleanup:
        bound.bind(("127.0.0.1", 0))
        demo.listener = bound
        claim_home(demo)
        assert running_demo(home)["url"] == f"http://127.0.0.1:{bound.getsockname()[1]}/"
