"""One writer per workspace, and a way for other processes to ask it to flush.

The owner holds an exclusive ``flock`` on ``<journal>/owner.lock`` for as long as the
workspace is open (the kernel drops it when the process dies, so a crash never leaves a
stale lock) and writes its PID and the path of its flush socket into the file. Another
process that wants a flush (``datahub cache flush``) connects to that unix socket, sends
``flush``, and gets the FlushReport back as one JSON line; when nobody holds the lock it
opens the workspace and flushes itself.

The socket is ``<journal>/flush.sock``, in the workspace's 0700 journal directory, so only
the owner's user (and root) can reach it. Socket addresses are limited to ~107 bytes: a
longer path is bound and reached through a descriptor of its directory
(``/proc/self/fd/N/flush.sock``). Why not a short name in the temp directory (as before,
audit15's finding): there another user of the machine could connect when the umask let
them (make the owner flush, read its report), or create the name first and keep the
workspace from opening.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from datahub.errors import Conflict, DatahubError, StorageError

log = logging.getLogger(__name__)
_MAX_SOCKET_PATH = 100


def socket_path(journal_dir: Path) -> Path:
    return journal_dir / "flush.sock"


@contextlib.contextmanager
def _address(path: Path) -> Iterator[str]:
    """``path`` as an address ``bind``/``connect`` take: itself when short enough, else the
    same file named through a descriptor of its directory, held open for the call."""
    if len(str(path)) <= _MAX_SOCKET_PATH:
        yield str(path)
        return
    directory = os.open(path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{directory}/{path.name}"
    finally:
        os.close(directory)


class OwnerLock:
    def __init__(self, journal_dir: Path, what: str) -> None:
        self.path = journal_dir / "owner.lock"
        # owner-only (docs/writeback.md, "Files and their modes"): the workspace's journal and
        # staged bytes are below; a directory an earlier version made 0755 is tightened here
        journal_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        if os.stat(journal_dir).st_mode & 0o077:
            os.chmod(journal_dir, 0o700)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            pid = read_owner(journal_dir)
            raise Conflict(
                f"{what} is already open for writing by process {pid or '?'}; close it there, "
                "or use `datahub cache flush` which asks that process to flush",
                pid=pid,
            ) from None
        self._fd = fd
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None


def read_owner(journal_dir: Path) -> int | None:
    try:
        return int((journal_dir / "owner.lock").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def is_locked(journal_dir: Path) -> bool:
    """True when some process holds the workspace open (probe with a non-blocking flock)."""
    path = journal_dir / "owner.lock"
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


class FlushServer:
    """Answers ``flush`` requests on a unix socket with ``handler() -> dict`` as one JSON line."""

    def __init__(self, path: Path, handler: Callable[[], dict]) -> None:
        self.path = path
        self._handler = handler
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # left by a crashed owner; we hold the lock, so it is ours to replace
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with _address(path) as address:
            self._sock.bind(address)
        self._sock.listen(8)
        self._stopping = False
        self._thread = threading.Thread(target=self._serve, name="flush-server", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # closed
            if self._stopping:
                conn.close()
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rwb") as stream:
            line = stream.readline().strip()
            if line != b"flush":
                reply: dict = {"error": {"code": "invalid_input", "message": f"unknown request {line!r}"}}
            else:
                try:
                    reply = {"report": self._handler()}
                except DatahubError as exc:
                    reply = {"error": exc.to_dict()}
                except Exception as exc:  # report, never kill the server thread
                    log.exception("flush request failed")
                    reply = {"error": {"code": "internal", "message": str(exc)}}
            try:
                stream.write(json.dumps(reply).encode() + b"\n")
                stream.flush()
            except OSError:
                pass  # the requester went away

    def close(self) -> None:
        self._stopping = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        self._thread.join(5)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def request_flush(path: Path, what: str, timeout: float | None = None) -> dict:
    """Ask the owning process to flush; returns its report dict (raises its error)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            with _address(path) as address:
                sock.connect(address)
            sock.sendall(b"flush\n")
            with sock.makefile("rb") as stream:
                line = stream.readline()
    except OSError as exc:
        raise StorageError(
            f"cannot reach the process that holds {what} open ({path}): {exc}; retry, or stop that process"
        ) from exc
    if not line:
        raise StorageError(f"the process that holds {what} open closed the flush request without answering")
    reply = json.loads(line)
    if "error" in reply:
        raise StorageError(f"flush of {what} by its owning process failed: {reply['error']['message']}")
    return reply["report"]
