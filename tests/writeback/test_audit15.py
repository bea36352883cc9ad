"""audit15: a workspace's flush socket is its owner's alone, wherever the journal lives.

The owner of an open workspace answers ``flush`` requests on a unix socket. A socket path
is limited to ~107 bytes, so a journal directory with a long path (a CSI volume's, a home
deep in a checkout) put the socket in the machine's shared temp directory instead, as
``$TMPDIR/datahub-wb-<hash>.sock`` (the name docs/writeback.md gave), made with the
process's umask. There, another user of the machine could

- connect under a permissive umask, make the owner flush and read its report; and
- create that name first (a directory: not even root may unlink one), so that the
  workspace could not be opened at all.

The socket now always lives in the workspace's own journal directory (0700), reached
through a descriptor of that directory when its path is too long.
"""

from __future__ import annotations

import hashlib
import os
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.writeback import flush_workspace, workspace_dir
from datahub.writeback.owner import socket_path
from tests.api.test_audit14 import as_nobody
from tests.cache.test_file_modes import open_umask, reachable  # noqa: F401 - fixtures
from tests.writeback.conftest import Env, make_env, write

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user (nobody)")


@pytest.fixture
def deep_env(reachable: Path) -> Iterator[Env]:  # noqa: F811
    """A workspace home every uid may traverse (so only the workspace's own modes keep
    another user out) whose journal path is too long for a unix socket address."""
    e = make_env(reachable / ("deep-" * 20) / "home")
    assert len(str(workspace_dir(e.config, "ws") / "flush.sock")) > 107
    yield e
    e.close()


def _documented_tmp_name(journal_dir: Path) -> Path:
    """Where the owner put its socket before: the name another user can compute."""
    digest = hashlib.sha256(str(journal_dir).encode()).hexdigest()[:20]
    return Path(tempfile.gettempdir()) / f"datahub-wb-{digest}.sock"


def _connect_as_nobody(path: Path) -> bytes:
    """Try, as user nobody, to reach the socket at ``path`` and ask it to flush."""

    def act() -> bytes:
        try:
            directory = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(30)
                sock.connect(f"/proc/self/fd/{directory}/{path.name}")
                sock.sendall(b"flush\n")
                return b"answered: " + sock.makefile("rb").readline()
        except OSError as exc:
            return f"refused: {exc.strerror}".encode()

    return as_nobody(act)


def test_another_user_cannot_reach_the_flush_socket(deep_env: Env, open_umask: None) -> None:  # noqa: F811
    ws = deep_env.open()
    write(ws, "secret.txt", b"not committed yet")
    workspaces = workspace_dir(deep_env.config, "ws").parent
    assert as_nobody(lambda: str(os.listdir(workspaces)).encode()) == b"['ws']"  # the premise: reachable
    tmp_name = _documented_tmp_name(workspace_dir(deep_env.config, "ws"))
    for path in (socket_path(workspace_dir(deep_env.config, "ws")), tmp_name):
        answer = _connect_as_nobody(path)
        assert answer.startswith(b"refused: "), (path, answer)
    assert ws.dirty() != []  # nobody's attempts flushed nothing
    # the owner's own user still reaches it: another process's flush asks the owner
    assert flush_workspace("ws", deep_env.config, deep_env.stores).uploaded == 1
    assert ws.dirty() == []


def test_another_user_cannot_keep_a_workspace_from_opening(deep_env: Env) -> None:
    tmp_name = _documented_tmp_name(workspace_dir(deep_env.config, "ws"))

    def squat() -> bytes:
        try:
            os.mkdir(tmp_name)
        except OSError as exc:
            return f"failed: {exc!r}".encode()
        return b"made"

    assert as_nobody(squat) == b"made"
    try:
        ws = deep_env.open()
        write(ws, "out.txt", b"outputs")
        assert flush_workspace("ws", deep_env.config, deep_env.stores).uploaded == 1
        assert deep_env.origin_files() == {"out.txt": hashlib.sha256(b"outputs").hexdigest()}
    finally:
        os.rmdir(tmp_name)
