"""``datahub umount PATH`` unmounts only what ``datahub mount`` mounted (gaps26).

Before, it unmounted whatever the kernel showed at PATH with ``fusermount3 -u``, which as root
unmounts any mount: a user's own FUSE file system (here a tiny one, ``tests/fuse/foreign_fs.py``,
live and stale), a plain bind mount, a bind of a datahub mount (a CSI volume's target). Now
each is refused with exit 2 naming the path and what is mounted there, and stays mounted; a
datahub mount, live or stale (its daemon killed, even with its record gone), is still unmounted.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fuse_adapter.daemon import is_mounted, record_path, visible_mount
from tests.fuse.conftest import Dataset, FuseEnv, upload_dataset, wait_until

pytestmark = pytest.mark.fuse
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def small(env: FuseEnv) -> Dataset:
    return upload_dataset(env, "small", {"a/b.txt": b"hello", "c.txt": b"world"})


@contextlib.contextmanager
def foreign_mount(point: Path) -> Iterator[subprocess.Popen]:
    """The tiny non-datahub FUSE file system mounted at ``point`` for the block."""
    point.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fuse.foreign_fs", str(point)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n", proc.stderr
        yield proc
    finally:
        if is_mounted(str(point)):
            subprocess.run(["fusermount3", "-uz", str(point)], check=False)
        if proc.poll() is None:
            proc.kill()
        proc.wait()


@contextlib.contextmanager
def bind_mount(source: Path, target: Path) -> Iterator[None]:
    target.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "--bind", str(source), str(target)], check=True)
    try:
        yield
    finally:
        while is_mounted(str(target)):
            subprocess.run(["umount", "-l", str(target)], check=True)


def refused(env: FuseEnv, path: Path, *args: str) -> str:
    proc = env.cli(*args, "umount", str(path), check=False)
    assert proc.returncode == 2, f"datahub umount {path} exited {proc.returncode}: {proc.stdout}{proc.stderr}"
    assert str(path) in proc.stderr and "nothing was unmounted" in proc.stderr, proc.stderr
    return proc.stderr


def test_a_users_own_fuse_mount_survives_datahub_umount(env: FuseEnv, small: Dataset, tmp_path: Path) -> None:
    point = tmp_path / "theirs"
    with foreign_mount(point) as proc:
        said = refused(env, point)
        assert "not a datahub mount" in said and "fuse.foreign" in said and "me@elsewhere:/data" in said
        assert is_mounted(str(point)) and proc.poll() is None
        assert (point / "hello.txt").read_bytes() == b"not datahub's\n"  # still served
        # its daemon killed: a stale mount of theirs stays theirs, for umount and for mount
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        with pytest.raises(OSError):
            os.listdir(point)
        said = refused(env, point)
        assert "fuse.foreign" in said and is_mounted(str(point))
        over = env.cli("mount", str(point), "small", check=False)
        assert over.returncode == 4 and "not a datahub mount" in over.stderr, over.stderr
        assert visible_mount(str(point)) == ("fuse.foreign", "me@elsewhere:/data")


def test_a_plain_bind_mount_and_one_over_a_datahub_mount_survive(
    env: FuseEnv, small: Dataset, tmp_path: Path
) -> None:
    mine = tmp_path / "my-files"
    mine.mkdir()
    (mine / "keep.txt").write_text("mine")
    point = tmp_path / "bound"
    with bind_mount(mine, point):
        said = refused(env, point)
        assert "not a datahub mount" in said and is_mounted(str(point))
        assert (point / "keep.txt").read_text() == "mine"
    mnt = env.mountpoint("under")
    with env.mounted(mnt, "small"), bind_mount(mine, mnt):
        # the datahub mount's record names mnt, but what the path shows is the user's bind
        said = refused(env, mnt)
        assert "mounted over the datahub mount" in said
        assert (mnt / "keep.txt").read_text() == "mine"
        assert record_path(env.config.home_path, str(mnt)).exists()


def test_binds_of_a_datahub_mount_and_paths_inside_it_are_refused(
    env: FuseEnv, small: Dataset, tmp_path: Path
) -> None:
    mnt = env.mountpoint("dh")
    version, whole = tmp_path / "pod-volume", tmp_path / "whole-bind"
    with env.mounted(mnt, "small"):
        inside = refused(env, mnt / "small" / "v1")
        assert "inside the datahub mount" in inside and f"datahub umount {mnt}" in inside
        with bind_mount(mnt / "small" / "v1", version), bind_mount(mnt, whole):
            said = refused(env, version)  # as a CSI dataset volume's target is
            assert "bind mount of the datahub mount" in said and f"datahub umount {mnt}" in said
            assert "/small/v1" in said
            said = refused(env, whole)
            assert "bind mount of the datahub mount" in said and f"datahub umount {mnt}" in said
            assert (version / "c.txt").read_bytes() == b"world"
            assert (whole / "small" / "v1" / "a" / "b.txt").read_bytes() == b"hello"
            assert is_mounted(str(mnt)) and is_mounted(str(version)) and is_mounted(str(whole))
        # a live datahub mount this home has no record of (another --home): its daemon is unknown here
        other = tmp_path / "other-home"
        said = refused(env, mnt, "--home", str(other))
        assert "no mount of this home made" in said and is_mounted(str(mnt))
        assert (mnt / "small" / "v1" / "c.txt").read_bytes() == b"world"
        out = env.cli("umount", str(mnt)).stdout
        assert "stopped" in out and not is_mounted(str(mnt))
    plain = tmp_path / "plain"
    plain.mkdir()
    out = env.cli("umount", str(plain))
    assert out.returncode == 0 and "not mounted" in out.stdout


def test_a_stale_datahub_mount_is_still_unmounted_even_with_no_record(
    env: FuseEnv, small: Dataset, tmp_path: Path
) -> None:
    mnt = env.mountpoint("stale")
    with env.mounted(mnt, "small") as proc:
        wait_until(lambda: record_path(env.config.home_path, str(mnt)).exists(), 60)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        # mounted under another home: no record here, and a dead daemon: still datahub's to clean
        out = env.cli("--home", str(tmp_path / "other-home"), "umount", str(mnt)).stdout
        assert "cleaned stale mount" in out and not is_mounted(str(mnt))
