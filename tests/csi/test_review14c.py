"""review14c: the beneath swap of a repair (csi/beneath.py, ``mounts.replace``) on real mounts.

Repaired twice in a row (a second supervisor pass, a daemon that died again), the target must
still be one mount, read-only when asked, showing the newest view; under a parent that is a
shared mount (the kubelet's pods directory with Bidirectional propagation) the swap must
still be beneath, never the unmount-first fallback."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from csi import beneath, mounts

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts need root")


def _mounts_at(path: Path) -> list[list[str]]:
    with open("/proc/self/mountinfo") as fh:
        return [line.split() for line in fh if line.split()[4] == str(path)]


@contextlib.contextmanager
def _tmpfs(path: Path, content: bytes) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(path)], check=True)
    try:
        (path / "f").write_bytes(content)
        yield path
    finally:
        subprocess.run(["umount", "-R", "-l", str(path)], check=False)


@pytest.mark.parametrize("shared_parent", [False, True])
def test_a_target_repaired_twice_is_one_read_only_mount_of_the_newest_view(
    tmp_path: Path, shared_parent: bool
) -> None:
    with contextlib.ExitStack() as stack:
        parent = stack.enter_context(_tmpfs(tmp_path / "pods", b""))
        if shared_parent:
            subprocess.run(["mount", "--make-shared", str(parent)], check=True)
        views = [stack.enter_context(_tmpfs(tmp_path / f"view{i}", f"view {i}".encode())) for i in range(3)]
        target = parent / "target"
        target.mkdir()
        mounts.bind(str(views[0]), str(target), readonly=True)
        assert beneath.bind_beneath(str(views[1]), str(target), readonly=True), "no beneath swap here"
        mounts.unmount(str(target), lazy=True)
        mounts.replace(str(views[2]), str(target), readonly=True)  # repaired again
        at = _mounts_at(target)
        assert len(at) == 1, at
        assert "ro" in at[0][5].split(","), at
        assert (target / "f").read_bytes() == b"view 2"
        with pytest.raises(OSError):
            (target / "g").write_bytes(b"must not land")
        assert not (views[2] / "g").exists()
