"""wbreview44 spot-checks on a workspace mount (found sound, kept as checks): copy_file_range
and sendfile into and out of the mount, O_APPEND from two descriptors, holes, a directory
renamed while a file in it is open for writing, and a descriptor shared by dup and by a
forked child. Each acknowledged result is read back after a kill -9 of the daemon and a
remount, so it is what the journal holds, not what the daemon's memory or the unmount's
final commit had."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fuse.conftest import FuseEnv, make_env
from tests.fuse.test_workspace_review11 import _kill_9
from tests.servers import S3Endpoint

pytestmark = pytest.mark.fuse

PAGE = 16384


@pytest.fixture
def env(tmp_path: Path, moto_endpoint: S3Endpoint) -> FuseEnv:
    return make_env(tmp_path, moto_endpoint, cache=f"page_size = {PAGE}\n")


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("flags", [(), ("--writeback-cache",)], ids=["daemon", "writeback-cache"])
def test_copies_appends_holes_renames_and_shared_descriptors(
    env: FuseEnv, tmp_path: Path, flags: tuple[str, ...]
) -> None:
    name = "w44spot"
    mnt = env.mountpoint(name)
    src = tmp_path / "local.bin"
    local = os.urandom(3 * PAGE + 123)
    src.write_bytes(local)
    expected: dict[str, bytes] = {}
    with env.mounted(mnt, "--workspace", name, *flags) as proc:
        # sendfile into the mount, copy_file_range within it (between file systems the kernel
        # answers EXDEV to copy_file_range: cp falls back), sendfile out of it
        with open(src, "rb") as fin, open(mnt / "sendfile.bin", "wb") as fout:
            sent = 0
            while sent < len(local):
                sent += os.sendfile(fout.fileno(), fin.fileno(), sent, len(local) - sent)
        expected["sendfile.bin"] = local
        with open(mnt / "sendfile.bin", "rb") as fin, open(mnt / "cfr.bin", "wb") as fout:
            left = len(local)
            while left:
                left -= os.copy_file_range(fin.fileno(), fout.fileno(), left)
        expected["cfr.bin"] = local
        with open(mnt / "cfr.bin", "rb") as fin, open(tmp_path / "out.bin", "wb") as fout:
            sent = 0
            while sent < len(local):
                sent += os.sendfile(fout.fileno(), fin.fileno(), sent, len(local) - sent)
        assert (tmp_path / "out.bin").read_bytes() == local
        # O_APPEND from two descriptors, interleaved
        a = os.open(mnt / "append.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        b = os.open(mnt / "append.log", os.O_WRONLY | os.O_APPEND)
        lines = [f"line {i} {'y' * (i * 97 % 3000)}\n".encode() for i in range(40)]
        for i, line in enumerate(lines):
            os.write(a if i % 2 else b, line)
        os.fsync(b)
        os.close(a)
        os.close(b)
        expected["append.log"] = b"".join(lines)
        # holes: written past the end, and grown by ftruncate
        fd = os.open(mnt / "holes.bin", os.O_RDWR | os.O_CREAT, 0o644)
        os.pwrite(fd, b"head", 0)
        os.pwrite(fd, b"tail", 5 * PAGE + 10)
        os.ftruncate(fd, 7 * PAGE)
        assert os.pread(fd, 7 * PAGE, 0) == b"head" + bytes(5 * PAGE + 6) + b"tail" + bytes(2 * PAGE - 14)
        os.close(fd)
        expected["holes.bin"] = b"head" + bytes(5 * PAGE + 6) + b"tail" + bytes(2 * PAGE - 14)
        # a directory renamed while a file in it is open for writing
        (mnt / "d1").mkdir()
        fd = os.open(mnt / "d1" / "open.bin", os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(fd, b"before rename ")
        os.rename(mnt / "d1", mnt / "d2")
        os.write(fd, b"after rename")
        os.close(fd)
        expected["d2/open.bin"] = b"before rename after rename"
        # dup, and a forked child writing through the inherited descriptor
        fd = os.open(mnt / "shared.bin", os.O_WRONLY | os.O_CREAT, 0o644)
        dup = os.dup(fd)
        os.write(fd, b"parent ")
        pid = os.fork()
        if pid == 0:  # the child: write, close its copy (a FLUSH: commits), exit
            try:
                os.write(dup, b"child ")
                os.close(dup)
                os.close(fd)
            finally:
                os._exit(0)
        assert os.waitpid(pid, 0)[1] == 0
        os.write(dup, b"dup")
        os.close(dup)
        os.close(fd)
        expected["shared.bin"] = b"parent child dup"
        assert _tree(mnt) == expected  # as the mount shows it
        _kill_9(proc)  # what the journal holds
        with env.mounted(mnt, "--workspace", name):
            assert _tree(mnt) == expected
