"""A writable workspace mounted for real: every claim of docs/semantics.md, and durability.

Each test mounts workspace ``ws`` whose flush target is ``s3://<bucket>/objects/workspaces/ws``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.catalog import open_catalog
from datahub.errors import NoSpace, ReadOnly, StorageError
from datahub.storage import StoreRegistry
from fuse_adapter.daemon import is_mounted, record_path
from fuse_adapter.fuse_ops import _errno_of
from tests.fuse.conftest import REPO, FuseEnv, make_env
from tests.fuse.fuse_tracepoint import FuseRequests
from tests.servers import S3Endpoint
from tests.writeback.flushed import strip_journal

pytestmark = pytest.mark.fuse


@pytest.fixture(scope="module", params=[[], ["--writeback-cache"]], ids=["daemon", "writeback-cache"])
def ws_mount(
    tmp_path_factory: pytest.TempPathFactory, moto_endpoint: S3Endpoint, request: pytest.FixtureRequest
) -> Iterator[tuple[FuseEnv, Path]]:
    """The workspace mounted as by default, and with the kernel's write-back cache: one mount
    of each for the module's tests of file system semantics (a workspace mount's start and
    its ``datahub umount`` cost ~0.7 CPU-s; 24 of them were most of this file's time)."""
    env = make_env(tmp_path_factory.mktemp("ws"), moto_endpoint)
    mnt = env.mountpoint("ws")
    with env.mounted(mnt, "--workspace", "ws", *request.param):
        yield env, mnt


@pytest.fixture
def ws(ws_mount: tuple[FuseEnv, Path], request: pytest.FixtureRequest) -> Path:
    """A directory of the test's own in the module's mount (made through the mount): what the
    test creates, lists and removes meets nothing another test left."""
    path = ws_mount[1] / request.node.originalname
    path.mkdir()
    return path


def _bucket_objects(env: FuseEnv) -> dict[str, bytes]:
    prefix = "objects/workspaces/ws"
    with StoreRegistry(env.config) as stores:
        store = stores.store(f"s3://{env.bucket}/{prefix}")
        return strip_journal({o.key: store.read(o.key) for o in store.list()})  # j-<id>/<path>


def test_create_write_read_back(ws: Path) -> None:
    data = os.urandom(3 * 1024**2 + 11)
    with open(ws / "out.bin", "wb") as fh:
        for i in range(0, len(data), 100_000):
            fh.write(data[i : i + 100_000])
    assert (ws / "out.bin").read_bytes() == data
    st = (ws / "out.bin").stat()
    assert st.st_size == len(data) and stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o644
    assert (st.st_uid, st.st_gid) == (os.getuid(), os.getgid())
    with pytest.raises(FileExistsError):
        os.open(ws / "out.bin", os.O_WRONLY | os.O_CREAT | os.O_EXCL)


def test_random_writes_match_a_reference_model(ws: Path) -> None:
    rng = random.Random(3)
    model = bytearray()
    fd = os.open(ws / "rand.bin", os.O_RDWR | os.O_CREAT)
    try:
        for _ in range(60):
            op = rng.random()
            if op < 0.7:
                offset = rng.randint(0, len(model) + 300_000)
                chunk = rng.randbytes(rng.randint(1, 200_000))
                os.pwrite(fd, chunk, offset)
                if offset > len(model):
                    model.extend(b"\0" * (offset - len(model)))
                model[offset : offset + len(chunk)] = chunk
            elif op < 0.85:
                size = rng.randint(0, len(model) + 100_000)
                os.ftruncate(fd, size)
                model = model[:size] + b"\0" * max(0, size - len(model))
            else:
                offset = rng.randint(0, len(model))
                assert os.pread(fd, 150_000, offset) == bytes(model[offset : offset + 150_000])
        os.fsync(fd)
    finally:
        os.close(fd)
    assert (ws / "rand.bin").read_bytes() == bytes(model)


def test_truncate_by_path(ws: Path) -> None:
    (ws / "t.txt").write_bytes(b"0123456789")
    os.truncate(ws / "t.txt", 4)
    assert (ws / "t.txt").read_bytes() == b"0123"
    os.truncate(ws / "t.txt", 6)
    assert (ws / "t.txt").read_bytes() == b"0123\0\0"
    with open(ws / "t.txt", "wb"):  # O_TRUNC
        pass
    assert (ws / "t.txt").stat().st_size == 0


def test_mkdir_rmdir_readdir(ws: Path) -> None:
    os.makedirs(ws / "a" / "b")
    (ws / "a" / "b" / "f").write_bytes(b"x")
    assert sorted(os.listdir(ws / "a")) == ["b"]
    assert stat.S_IMODE((ws / "a").stat().st_mode) == 0o755
    with pytest.raises(FileExistsError):
        os.mkdir(ws / "a")
    with pytest.raises(OSError) as exc:
        os.rmdir(ws / "a" / "b")
    assert exc.value.errno == errno.ENOTEMPTY
    with pytest.raises(NotADirectoryError):
        os.rmdir(ws / "a" / "b" / "f")
    os.unlink(ws / "a" / "b" / "f")
    os.rmdir(ws / "a" / "b")
    assert os.listdir(ws / "a") == []
    with pytest.raises(FileNotFoundError):
        (ws / "missing" / "x").write_bytes(b"")


def test_rename_files_and_directories(ws: Path) -> None:
    os.makedirs(ws / "d1" / "sub")
    (ws / "d1" / "sub" / "f").write_bytes(b"inner")
    (ws / "x").write_bytes(b"x")
    (ws / "y").write_bytes(b"y")
    os.rename(ws / "x", ws / "y")  # replaces the target
    assert (ws / "y").read_bytes() == b"x" and not (ws / "x").exists()
    os.rename(ws / "d1", ws / "d2")
    assert (ws / "d2" / "sub" / "f").read_bytes() == b"inner"
    assert not (ws / "d1").exists()
    os.rename(ws / "y", ws / "d2" / "sub" / "moved")
    assert sorted(os.listdir(ws / "d2" / "sub")) == ["f", "moved"]
    with pytest.raises(OSError) as exc:
        os.rename(ws / "d2", ws / "d2" / "sub" / "inside")
    assert exc.value.errno == errno.EINVAL


def test_unlink_keeps_open_handles_readable(ws: Path) -> None:
    (ws / "gone").write_bytes(b"still here")
    fd = os.open(ws / "gone", os.O_RDONLY)
    try:
        os.unlink(ws / "gone")
        assert not (ws / "gone").exists()
        assert os.pread(fd, 100, 0) == b"still here"
        assert os.fstat(fd).st_nlink == 0
    finally:
        os.close(fd)


def test_unsupported_operations(ws: Path) -> None:
    (ws / "f").write_bytes(b"f")
    for action in (lambda: os.symlink("f", ws / "s"), lambda: os.link(ws / "f", ws / "h")):
        with pytest.raises(OSError) as exc:
            action()
        assert exc.value.errno in (errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM)
    with pytest.raises(PermissionError):
        os.chown(ws / "f", os.getuid() + 1, -1)
    os.chmod(ws / "f", 0o600)  # accepted, ignored
    assert stat.S_IMODE((ws / "f").stat().st_mode) == 0o644


def test_workspace_has_one_mount(ws_mount: tuple[FuseEnv, Path]) -> None:
    env = ws_mount[0]
    other = env.mountpoint("ws2")
    second = env.cli("mount", str(other), "--workspace", "ws", check=False)
    assert second.returncode == 4 and "ws" in second.stderr


def test_errno_translation_is_one_table() -> None:
    assert _errno_of(NoSpace("shared tier full")) == errno.ENOSPC
    assert _errno_of(StorageError("origin down")) == errno.EIO
    assert _errno_of(ReadOnly("ro")) == errno.EROFS
    assert _errno_of(RuntimeError("bug")) == errno.EIO


def test_clean_umount_flushes_to_the_bucket(env: FuseEnv) -> None:
    mnt = env.mountpoint("ws")
    with env.mounted(mnt, "--workspace", "ws"):
        os.makedirs(mnt / "ckpt")
        (mnt / "ckpt" / "model.pt").write_bytes(b"weights" * 1000)
        (mnt / "log.txt").write_bytes(b"epoch 1\n")
        assert env.cli("umount", str(mnt)).returncode == 0
    assert _bucket_objects(env) == {"ckpt/model.pt": b"weights" * 1000, "log.txt": b"epoch 1\n"}


@pytest.mark.parametrize("how", ["close", "fsync"])
def test_acknowledged_files_survive_kill_9(env: FuseEnv, how: str) -> None:
    """Promise 3: closed or fsynced files reach the bucket after kill -9 and ``datahub umount``."""
    mnt = env.mountpoint("ws")
    data = os.urandom(5 * 1024**2 + 3)
    with env.mounted(mnt, "--workspace", "ws") as proc:
        if how == "close":
            (mnt / "done.bin").write_bytes(data)
        else:
            fd = os.open(mnt / "done.bin", os.O_WRONLY | os.O_CREAT)
            os.write(fd, data)
            os.fsync(fd)  # acknowledged; the fd stays open when the daemon dies
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        out = env.cli("umount", str(mnt)).stdout
        assert "recovered" in out
        if how == "fsync":
            with contextlib.suppress(OSError):  # the connection is gone: close may report ENOTCONN
                os.close(fd)
    assert _bucket_objects(env) == {"done.bin": data}


def test_restart_after_kill_9_uploads_acknowledged_files(env: FuseEnv) -> None:
    mnt = env.mountpoint("ws")
    with env.mounted(mnt, "--workspace", "ws") as proc:
        (mnt / "a.txt").write_bytes(b"acknowledged")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        subprocess.run(["fusermount3", "-uz", str(mnt)], check=True)
    with env.mounted(mnt, "--workspace", "ws"):  # a restart replays the journal
        assert (mnt / "a.txt").read_bytes() == b"acknowledged"
    assert _bucket_objects(env) == {"a.txt": b"acknowledged"}


@contextlib.contextmanager
def _catalog(env: FuseEnv) -> Iterator:
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        yield catalog
    finally:
        catalog.close()


def test_commit_to_makes_a_dataset_version(env: FuseEnv) -> None:
    mnt = env.mountpoint("ws")
    with _catalog(env) as catalog:
        catalog.create_dataset("outputs")
    with env.mounted(mnt, "--workspace", "ws", "--commit-to", "outputs"):
        (mnt / "metrics.json").write_bytes(b'{"acc": 0.9}')
    with _catalog(env) as catalog:
        records = {r.key: r.size for r in catalog.list_records("outputs", None)}
    assert records == {"metrics.json": 12}


def test_a_mount_that_never_became_ready_commits_nothing(env: FuseEnv) -> None:
    """Seed 26 of the chaos soak: a workspace mount that failed at start-up (disk full while
    writing its mount record) still committed the workspace on its way out, so the mount
    that succeeded later committed a second version under the same name, and the first one
    lacked every file acknowledged after it."""
    mnt = env.mountpoint("ws")
    with _catalog(env) as catalog:
        catalog.create_dataset("outputs")
    with env.mounted(mnt, "--workspace", "ws"):  # no --commit-to: the file stays in the workspace
        (mnt / "kept.txt").write_bytes(b"acknowledged before")
    # the mount record cannot be written: its directory is a full file system
    records = record_path(env.config.home_path, str(mnt)).parent
    records.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8k", "datahub-test-full", str(records)], check=True)
    try:
        with pytest.raises(OSError) as full:
            (records / "filler").write_bytes(b"x" * 65536)
        assert full.value.errno == errno.ENOSPC
        cmd = [sys.executable, "-m", "fuse_adapter", "--config", str(env.config_path)]
        cmd += ["mount", str(mnt), "--workspace", "ws", "--commit-to", "outputs", "--foreground"]
        failed = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO)
        assert failed.returncode == NoSpace.exit_code, failed.stderr
        assert not is_mounted(str(mnt))
        assert "never became ready" in failed.stderr
        assert "could not be written" in failed.stderr and "Traceback" not in failed.stderr, failed.stderr
        assert sorted(p.name for p in records.iterdir()) == ["filler"]  # nothing half-written
    finally:
        subprocess.run(["umount", str(records)], check=True)
    with _catalog(env) as catalog:
        assert list(catalog.log("outputs")) == []
    with env.mounted(mnt, "--workspace", "ws", "--commit-to", "outputs"):
        (mnt / "later.txt").write_bytes(b"acknowledged after")
    with _catalog(env) as catalog:
        versions = list(catalog.log("outputs"))
        records = {r.key: r.size for r in catalog.list_records("outputs", None)}
    assert len(versions) == 1
    assert records == {"kept.txt": 19, "later.txt": 18}


def test_a_name_that_is_not_utf8_is_refused_at_create_and_the_commit_holds_the_rest(env: FuseEnv) -> None:
    """A name with bytes that are not UTF-8 (b"caf\\xe9") reaches the daemon as a lone surrogate
    (os.fsdecode); no catalog can store such a key, so it is refused as an invalid name (EINVAL,
    as for any key the workspace refuses), and the rest of the workspace commits. Before, the
    daemon failed with a bare UnicodeEncodeError, which the kernel saw as EIO."""
    mnt = env.mountpoint("ws")
    with _catalog(env) as catalog:
        catalog.create_dataset("outputs")
    with env.mounted(mnt, "--workspace", "ws", "--commit-to", "outputs"):
        with pytest.raises(OSError) as exc:
            os.open(os.fsencode(mnt) + b"/caf\xe9.bin", os.O_WRONLY | os.O_CREAT, 0o644)
        assert exc.value.errno == errno.EINVAL
        (mnt / "café.bin").write_bytes(b"utf-8 is fine")
        assert os.listdir(mnt) == ["café.bin"]
    with _catalog(env) as catalog:
        records = {r.key: r.size for r in catalog.list_records("outputs", None)}
    assert records == {"café.bin": 13}


def _super_options(mnt: Path) -> set[str]:
    """The FUSE superblock's options of mount ``mnt`` (``/proc/self/mountinfo``, last field)."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == str(mnt):
            return set(fields[-1].split(","))
    raise AssertionError(f"{mnt} is not mounted")


def test_creating_files_sends_no_getattr_of_their_directory(ws_mount: tuple[FuseEnv, Path], ws: Path) -> None:
    """A create invalidates the directory's attributes, and with ``default_permissions`` the
    next path walk asked the daemon for them again: one GETATTR per created file. A mount
    only its owner can enter needs no kernel mode checks (fuse_adapter.workspace.owner_only)."""
    (ws / "d").mkdir()
    with FuseRequests(ws) as requests:
        for i in range(20):
            (ws / "d" / f"f{i}").write_bytes(b"x" * 1000)
    counts = requests.counts()
    assert counts["FUSE_CREATE"] == 20
    assert counts["FUSE_GETATTR"] == 0, counts
    assert "default_permissions" not in _super_options(ws_mount[1])


def test_an_owner_only_mount_refuses_what_the_kernel_refused(ws: Path) -> None:
    """Without ``default_permissions`` the owner keeps exactly the owner bits' rights: a
    0644 file does not run, reads and writes are allowed, directories can be entered."""
    script = ws / "run.sh"
    script.write_text("#!/bin/sh\necho ran\n")
    os.chmod(script, 0o755)  # accepted and ignored: files stay 0644
    with pytest.raises(PermissionError):
        subprocess.run([str(script)], check=False)
    assert not os.access(script, os.X_OK)
    assert os.access(script, os.R_OK | os.W_OK)
    (ws / "sub").mkdir()
    assert os.access(ws / "sub", os.R_OK | os.W_OK | os.X_OK)
    assert os.listdir(ws / "sub") == []
    with pytest.raises(PermissionError):
        os.chown(script, os.getuid() + 1, -1)


def test_files_shown_as_another_user_keep_the_kernel_checks(env: FuseEnv) -> None:
    mnt = env.mountpoint("ws-uid")
    with env.mounted(mnt, "--workspace", "ws", "--uid", str(os.getuid() + 1)):
        assert "default_permissions" in _super_options(mnt)
        (mnt / "f").write_bytes(b"x")  # root (the tests' user) passes the owner bits anyway
        assert (mnt / "f").stat().st_uid == os.getuid() + 1
