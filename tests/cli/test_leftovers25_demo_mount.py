"""The demo's mount step unmounts only a killed demo's leftover at ``<home>/mnt``, never a mount
its user made there by hand: it refuses, naming that mount and what to do (leftovers25).

Before, the step ran ``datahub umount <home>/mnt`` whatever was mounted there, and a user's own
mount (here a ``datahub mount`` of the same home, as like a demo's as a mount can be) was gone.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.config import load_config
from datahub.demo import Demo, generate_sample, import_sample, prepare
from fuse_adapter.daemon import is_mounted, read_record, visible_mount
from fuse_adapter.demo_step import DEMO_MOUNT, clear_leftover, mount_and_epoch, remember_mount
from tests import zygote

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="needs /dev/fuse")


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "fuse_adapter", "--home", str(home), *args]
    return zygote.run(cmd, timeout=120, cwd=os.getcwd())  # a fork of a pre-imported interpreter


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[Demo]:
    """A demo of a fresh home with the sample imported (the steps before the mount step)."""
    home = tmp_path / "var"
    demo = Demo(
        load_config(None, overrides={"home": str(home)}), argparse.Namespace(skip=["serve"], config=None)
    )
    said: list[str] = []
    demo.say = said.append  # type: ignore[method-assign]
    demo.said = said  # type: ignore[attr-defined]
    try:
        with demo.cleanup:
            for step in (prepare, generate_sample, import_sample):
                step(demo)
            yield demo
    finally:
        mnt = home / "mnt"
        if is_mounted(str(mnt)):
            _cli(home, "umount", str(mnt))
        if is_mounted(str(mnt)):
            subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True)


def _hand_mount(home: Path) -> int:
    mnt = home / "mnt"
    mnt.mkdir(parents=True, exist_ok=True)
    proc = _cli(home, "mount", str(mnt), "sample@latest", "--background")
    assert proc.returncode == 0, proc.stderr
    record = read_record(home, str(mnt))
    assert record is not None and is_mounted(str(mnt))
    return record.pid


def test_a_mount_made_by_hand_at_the_demos_mount_point_stays(demo: Demo) -> None:
    home = demo.config.home_path
    mnt = home / "mnt"
    pid = _hand_mount(home)
    mount_and_epoch(demo)  # refuses before it mounts (and before any epoch)
    record = read_record(home, str(mnt))
    assert is_mounted(str(mnt)) and record is not None and record.pid == pid, demo.said  # type: ignore[attr-defined]
    assert len(list((mnt / "sample" / "latest").rglob("*.jpg"))) == 300
    said = "\n".join(demo.said)  # type: ignore[attr-defined]
    assert (
        f"[mount] skipped: {mnt} is already a mount point (datahub:sample@latest, type fuse.datahub)" in said
    )
    assert f"umount {mnt}" in said and "DATAHUB_HOME=DIR make run" in said, said
    assert not (home / DEMO_MOUNT).exists()
    demo.cleanup.close()  # the demo's own cleanups leave the user's mount mounted too
    assert is_mounted(str(mnt)) and read_record(home, str(mnt)).pid == pid  # type: ignore[union-attr]


def test_a_killed_demos_mount_is_cleared(demo: Demo) -> None:
    """The daemon a demo noted (``remember_mount``) outlives the demo's SIGKILL: the next demo
    unmounts it, and mounts afresh."""
    home = demo.config.home_path
    mnt = home / "mnt"
    _hand_mount(home)
    remember_mount(home, mnt)  # as the killed demo's mount step did once it had mounted
    assert visible_mount(str(mnt)) == ("fuse.datahub", "datahub:sample@latest")
    assert clear_leftover(demo, mnt) is None
    assert not is_mounted(str(mnt)) and read_record(home, str(mnt)) is None
    assert not (home / DEMO_MOUNT).exists()


def test_a_note_of_another_daemon_is_no_licence(demo: Demo) -> None:
    """A note left by an earlier demo whose daemon is gone does not make a later hand mount a
    leftover: it names another daemon."""
    home = demo.config.home_path
    mnt = home / "mnt"
    pid = _hand_mount(home)
    noted = {"mountpoint": os.path.realpath(mnt), "pid": pid + 100000, "source": "sample@latest"}
    (home / DEMO_MOUNT).write_text(json.dumps(noted) + "\n")
    refused = clear_leftover(demo, mnt)
    assert refused is not None and str(mnt) in refused
    assert is_mounted(str(mnt)) and read_record(home, str(mnt)).pid == pid  # type: ignore[union-attr]
