"""What a new user met with a write-back workspace mount (newuser15), through the real command."""

from __future__ import annotations

import getpass
import os

import pytest

from datahub.catalog import open_catalog
from fuse_adapter.daemon import is_mounted
from tests.fuse.conftest import FuseEnv

pytestmark = pytest.mark.fuse


def test_umount_of_a_workspace_says_which_version_holds_its_files(env: FuseEnv) -> None:
    """README's tour: ``datahub umount /mnt/out`` flushes and commits to ``--commit-to``. It
    printed only "stopped", so the user hunted for the version their checkpoint went to."""
    open_catalog(env.config.resolved_catalog_url).close()  # `datahub init`
    mnt = env.mountpoint("out")
    try:
        env.cli("mount", "--background", "--workspace", "run-42", str(mnt), "--commit-to", "outputs")
        (mnt / "metrics.txt").write_text("epoch 1: loss 0.42\n")
        out = env.cli("umount", str(mnt)).stdout
        assert not is_mounted(str(mnt))
        assert out.strip() == f"{mnt}: stopped: workspace run-42 flushed; its files are outputs@v1", out

        env.cli("mount", "--background", "--workspace", "run-42", str(mnt), "--commit-to", "outputs")
        (mnt / "metrics.txt").write_text("epoch 2: loss 0.30\n")
        out = env.cli("umount", str(mnt)).stdout
        assert out.strip() == f"{mnt}: stopped: workspace run-42 flushed; its files are outputs@v2", out

        with open_catalog(
            env.config.resolved_catalog_url
        ) as catalog:  # who made them, as `datahub log` shows
            assert [catalog.resolve("outputs", n).author for n in (1, 2)] == [getpass.getuser()] * 2

        env.cli("mount", "--background", "--workspace", "scratch", str(mnt))
        out = env.cli("umount", str(mnt)).stdout
        assert (
            out.strip() == f"{mnt}: stopped: workspace scratch flushed (no --commit-to: nothing committed)"
        ), out
    finally:
        env.teardown(mnt, None)


def test_a_commit_to_mount_without_a_catalog_is_refused_before_it_takes_a_write(env: FuseEnv) -> None:
    """On a home with no catalog, ``mount --workspace W MNT --commit-to D`` mounted, took the
    run's files, and ``datahub umount`` then failed with "no catalog" (exit 3), committing
    nothing. The start is refused the same way now, saying what --commit-to needs."""
    catalog = env.config.resolved_catalog_url.removeprefix("sqlite:///")
    mnt = env.mountpoint("out")
    try:
        for how in ("--background", "--foreground"):
            proc = env.cli(
                "mount", how, "--workspace", "run-1", str(mnt), "--commit-to", "outputs", check=False
            )
            assert proc.returncode == 3, (proc.returncode, proc.stderr)
            assert "--commit-to outputs commits into a catalog at unmount, and there is none" in proc.stderr
            assert f"no catalog at {catalog}" in proc.stderr and " init`" in proc.stderr
            assert not is_mounted(str(mnt))
        # a dataset version is read from the catalog: the same refusal, and no empty catalog made
        for how in ("--background", "--foreground"):
            proc = env.cli("mount", how, str(mnt), "sample@v1", check=False)
            assert proc.returncode == 3, (proc.returncode, proc.stderr)
            assert f"no catalog at {catalog}" in proc.stderr and "not found" not in proc.stderr, proc.stderr
            assert not is_mounted(str(mnt)) and not os.path.exists(catalog)
        env.cli("mount", "--background", "--workspace", "run-1", str(mnt))  # no commit: no catalog needed
        assert is_mounted(str(mnt))
    finally:
        env.teardown(mnt, None)


def test_a_second_mount_of_a_workspace_names_the_mount_that_holds_it(env: FuseEnv) -> None:
    """A second ``datahub mount --workspace run-42`` said the workspace was open "by process N",
    to "close it there, or use `datahub cache flush`": no word of the mount to unmount."""
    first, second = env.mountpoint("out"), env.mountpoint("out2")
    try:
        env.cli("mount", "--background", "--workspace", "run-42", str(first))
        for how in ("--background", "--foreground"):
            other = env.cli("mount", how, "--workspace", "run-42", str(second), check=False)
            assert other.returncode == 4, other.stderr
            assert f"already open for writing by the mount at {first} (pid " in other.stderr
            assert f"(`datahub umount {first}`)" in other.stderr
            assert not is_mounted(str(second))
        env.cli("umount", str(first))
        env.cli("mount", "--background", "--workspace", "run-42", str(second))  # as the message says
        assert is_mounted(str(second))
    finally:
        env.teardown(second, None)
        env.teardown(first, None)
