"""caller74: a workspace mount other accounts may enter (``--allow-other``) refuses a chmod
that would hide a file from them, instead of accepting it and showing the file as before.

A workspace's files are shown 0644 and its folders 0755, whatever chmod asks (docs/semantics.md):
on a mount only its owner may enter that hides nothing. With ``--allow-other`` the kernel
checks those modes (``default_permissions``) for every local account, so ``chmod 600
creds.json`` returned 0 while every user of the machine went on reading the file: its owner
was told it was private. Now such a chmod (one taking a read, write or search bit from group
or others) is EPERM, with a log line naming the file and what to do; one that takes nothing
is accepted and ignored as before. What other accounts may do there is unchanged and checked
here too (as ``nobody``): read and list, never write, create, rename, unlink or chmod.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.fuse.conftest import FuseEnv, make_env
from tests.servers import S3Endpoint

pytestmark = pytest.mark.fuse

NOBODY = 65534


@pytest.fixture(scope="module", params=[[], ["--request-loop", "trio"]], ids=["c-loop", "trio-loop"])
def shared_ws(
    tmp_path_factory: pytest.TempPathFactory, moto_endpoint: S3Endpoint, request: pytest.FixtureRequest
) -> Iterator[tuple[FuseEnv, Path]]:
    """A workspace mounted with --allow-other, its requests run by pyfuse3's C threads (the
    default) and by the trio loop: both call the same handlers."""
    env = make_env(tmp_path_factory.mktemp("shared-ws"), moto_endpoint)
    mnt = env.mountpoint("ws")
    with env.mounted(mnt, "--workspace", "ws", "--allow-other", *request.param):
        yield env, mnt


def as_nobody(cwd: Path, probes: dict[str, Callable[[], object]]) -> dict[str, str]:
    """Each probe's outcome ("ok" or the errno's name) in a child that entered ``cwd`` as root
    and then became uid/gid 65534 with no groups (the path above the mount is root's)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(r)
            os.chdir(cwd)
            os.setgroups([])
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, NOBODY)
            out = {}
            for name, probe in probes.items():
                try:
                    probe()
                    out[name] = "ok"
                except OSError as exc:
                    out[name] = errno.errorcode.get(exc.errno or 0, str(exc.errno))
            os.write(w, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as answer:
        data = answer.read()
    os.waitpid(pid, 0)
    return json.loads(data)


def _write(path: str) -> None:
    with open(path, "r+b") as f:
        f.write(b"x")


def _create(path: str) -> None:
    with open(path, "xb") as f:
        f.write(b"x")


def test_a_chmod_hiding_a_file_from_other_accounts_is_refused(shared_ws: tuple[FuseEnv, Path]) -> None:
    env, mnt = shared_ws
    (mnt / "creds.json").write_bytes(b'{"key": "s3cr3t"}')
    (mnt / "private").mkdir()
    for path, mode in ((mnt / "creds.json", 0o600), (mnt / "creds.json", 0o640), (mnt / "private", 0o700)):
        with pytest.raises(PermissionError) as caught:
            os.chmod(path, mode)
        assert caught.value.errno == errno.EPERM, (path, oct(mode))
    assert stat.S_IMODE((mnt / "creds.json").stat().st_mode) == 0o644  # as every account sees it
    os.chmod(mnt / "creds.json", 0o644)  # takes nothing from anyone: accepted, ignored
    os.chmod(mnt / "creds.json", 0o666)
    assert stat.S_IMODE((mnt / "creds.json").stat().st_mode) == 0o644
    log = (env.root / "mount-ws.log").read_text()
    assert "chmod 0600 of 'creds.json' refused" in log and "--allow-other" in log, log[-2000:]


def test_a_file_created_0600_is_shown_0644_to_every_account(shared_ws: tuple[FuseEnv, Path]) -> None:
    """What is not refused, and docs/semantics.md says: a create's mode is not kept either
    (refusing it would fail every ``mkstemp``), so a private file does not belong here."""
    _, mnt = shared_ws
    fd = os.open(mnt / "made-0600", os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o600)
    os.write(fd, b"key")
    os.close(fd)
    assert stat.S_IMODE((mnt / "made-0600").stat().st_mode) == 0o644
    assert as_nobody(mnt, {"read": lambda: Path("made-0600").read_bytes()}) == {"read": "ok"}


def test_other_accounts_read_and_list_and_change_nothing(shared_ws: tuple[FuseEnv, Path]) -> None:
    _, mnt = shared_ws
    (mnt / "mine.txt").write_bytes(b"mine")
    (mnt / "sub").mkdir()
    got = as_nobody(
        mnt,
        {
            "list": lambda: os.listdir("."),
            "read": lambda: Path("mine.txt").read_bytes(),
            "write": lambda: _write("mine.txt"),
            "truncate": lambda: os.truncate("mine.txt", 0),
            "create": lambda: _create("theirs.txt"),
            "create_in_sub": lambda: _create("sub/theirs.txt"),
            "mkdir": lambda: os.mkdir("theirs"),
            "rename": lambda: os.rename("mine.txt", "moved.txt"),
            "unlink": lambda: os.unlink("mine.txt"),
            "chmod": lambda: os.chmod("mine.txt", 0o666),
            "setxattr": lambda: os.setxattr("mine.txt", "user.x", b"1"),
        },
    )
    assert got == {
        "list": "ok",
        "read": "ok",
        "write": "EACCES",
        "truncate": "EACCES",
        "create": "EACCES",
        "create_in_sub": "EACCES",
        "mkdir": "EACCES",
        "rename": "EACCES",
        "unlink": "EACCES",
        "chmod": "EPERM",
        "setxattr": "EACCES",
    }
    assert (mnt / "mine.txt").read_bytes() == b"mine" and not (mnt / "theirs.txt").exists()


def test_a_mount_shown_as_another_accounts_keeps_accepting_chmod(env: FuseEnv) -> None:
    """``--uid``/``--gid`` naming another account: a mount made for that account (the CSI
    plugin's for a pod, its target out of other accounts' reach), where a refused chmod would
    only fail the pod's copies of 0600 files (``shutil.copy2``)."""
    mnt = env.mountpoint("for-nobody")
    with env.mounted(
        mnt, "--workspace", "for-nobody", "--allow-other", "--uid", str(NOBODY), "--gid", str(NOBODY)
    ):
        (mnt / "creds.json").write_bytes(b"{}")
        os.chmod(mnt / "creds.json", 0o600)  # accepted, ignored (docs/semantics.md)
        assert stat.S_IMODE((mnt / "creds.json").stat().st_mode) == 0o644
