"""Mount lifecycle around the FUSE shim: state files, background start, unmount, stale mounts.

A running mount leaves a small JSON record in ``<home>/run/mounts/`` (pid, mountpoint,
kind, workspace), so ``datahub umount`` can ask the right daemon to stop cleanly
(SIGTERM: stop serving, flush a workspace, unmount) and wait for it. If the daemon is
gone (kill -9, OOM) the kernel mount is stale (ENOTCONN); umount then detaches it with
``fusermount3 -uz`` and runs the recovery hook (a workspace replays its journal and
flushes), so acknowledged writes still reach the bucket. A workspace daemon whose own final
flush and commit succeeded says so in a second small file (``write_finished``) before it
exits; umount then has nothing to recover, and skips the reopen (unpublish15).
"""

from __future__ import annotations

import contextlib
import errno
import gc
import hashlib
import json
import logging
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NoReturn

from datahub.errors import Conflict, DatahubError, InvalidInput, NoSpace, StorageError, error_for_exit_code
from datahub.mountinfo import top_mount
from datahub.procs import pid_alive
from fuse_adapter import whose_mount
from fuse_adapter.mount_table import (  # noqa: F401  (DEAD_DAEMON_ERRNOS: csi reads it from this module)
    DEAD_DAEMON_ERRNOS,
    canonical,
    is_stale,
)

log = logging.getLogger(__name__)

READY = b"ready\n"


@dataclass
class MountRecord:
    mountpoint: str
    pid: int
    kind: str  # "readonly" | "workspace"
    source: str = ""  # what is mounted (specs, URL or workspace name)
    workspace: str = ""
    commit_to: str = ""
    started_at: float = 0.0
    # the author of what commit_to commits ("": the login name of whoever commits): kept here
    # so a dead daemon's recovery by ``datahub umount`` commits as the mount said (lease17)
    author: str = ""


def _runtime_dir(home: Path) -> Path:
    return home / "run" / "mounts"


def _private(directory: Path) -> None:
    """Make ``directory`` (and its parents) with only its owner let in, and take others out of
    one an earlier version made 0755. Why: a mount's record and log name the datasets, buckets
    and workspaces a user mounts, their mount points, warm-up scopes and error lines with keys
    and lease holders, and were readable by every local account (review19b)."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    if directory.stat().st_mode & 0o077:
        os.chmod(directory, 0o700)


def record_path(home: Path, mountpoint: str) -> Path:
    digest = hashlib.sha256(canonical(mountpoint).encode()).hexdigest()[:16]
    return _runtime_dir(home) / f"{digest}.json"


def write_record(home: Path, record: MountRecord) -> Path:
    """Written once the mount serves: ``datahub umount`` finds the daemon (and the workspace
    to recover) through it. A failure is the mount's failure, named, with nothing left half-written."""
    path = record_path(home, record.mountpoint)
    tmp = path.with_suffix(".tmp")
    try:
        _private(path.parent)
        tmp.write_text(json.dumps(asdict(record)))
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        error = NoSpace if exc.errno == errno.ENOSPC else StorageError
        raise error(
            f"mount {record.mountpoint}: its record {path} could not be written ({exc.strerror}); "
            f"the mount was undone. Make room or fix {path.parent}, then mount again",
            mountpoint=record.mountpoint,
        ) from exc
    return path


def read_record(home: Path, mountpoint: str) -> MountRecord | None:
    try:
        return MountRecord(**json.loads(record_path(home, mountpoint).read_text()))
    except (FileNotFoundError, ValueError, TypeError):
        return None


def workspace_mount(home: Path, workspace: str, pid: int | None) -> MountRecord | None:
    """The mount of ``home`` that serves ``workspace`` from process ``pid``, if any: so a second
    mount of a workspace in use names where it is mounted and how to unmount it, not only the
    process that holds it open."""
    for path in sorted(_runtime_dir(home).glob("*.json")):
        with contextlib.suppress(OSError, ValueError, TypeError):
            record = MountRecord(**json.loads(path.read_text()))
            if record.kind == "workspace" and record.workspace == workspace and record.pid == pid:
                return record
    return None


def remove_record(home: Path, mountpoint: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        record_path(home, mountpoint).unlink()


def _finished_path(home: Path, mountpoint: str) -> Path:
    return record_path(home, mountpoint).with_suffix(".finished")


def write_finished(home: Path, mountpoint: str, said: str) -> None:
    """A stopping workspace daemon's word that its final flush and commit succeeded and that
    nothing was acknowledged after them (``said``: what it did, in words), so ``unmount``
    need not reopen the workspace to re-check. Best effort: without it the reopen happens."""
    path = _finished_path(home, mountpoint)
    tmp = path.with_suffix(".finished-tmp")
    try:
        tmp.write_text(json.dumps({"pid": os.getpid(), "said": said}))
        os.replace(tmp, path)
    except OSError as exc:
        log.warning(
            "mount %s: could not record its finished flush (%s); umount re-checks it", mountpoint, exc
        )
        with contextlib.suppress(OSError):
            tmp.unlink()


def _take_finished(home: Path, mountpoint: str, pid: int) -> str | None:
    """What daemon ``pid`` said it finished (``write_finished``), consuming the file; None if it
    did not say (or another process wrote it)."""
    path = _finished_path(home, mountpoint)
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    if not isinstance(data, dict) or data.get("pid") != pid or not isinstance(data.get("said"), str):
        return None
    return data["said"]


def is_mounted(mountpoint: str) -> bool:
    """True if something is mounted there, even a stale FUSE mount whose daemon died.

    ``os.path.ismount`` cannot tell: stat() of a stale mount fails with ENOTCONN.
    """
    return top_mount(canonical(mountpoint)) is not None


def is_mount_daemon(pid: int, mountpoint: str) -> bool:
    """True if ``pid`` is alive and is the mount process of ``mountpoint``: one of its
    command-line arguments names that mount point (a relative one read against the
    process's working directory, as it was when the process resolved it).

    A recorded pid outlives its process (kill -9, OOM, a reboot): the kernel may have given it
    to an unrelated process since, which must never get the SIGTERM meant for the daemon, be
    waited for, or make a dead mount look live. ``datahub umount`` and the CSI plugin both ask this.
    """
    if not pid or not pid_alive(pid):
        return False
    target = canonical(mountpoint)
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            args = [os.fsdecode(a) for a in fh.read().split(b"\0") if a]
        if target in args:
            return True
        # only arguments ending in the mount point's name are resolved (no lookups for the rest)
        named = [a for a in args if os.path.basename(a.rstrip("/")) == os.path.basename(target)]
        cwd = os.readlink(f"/proc/{pid}/cwd") if named else ""
    except OSError:
        return False
    return any(canonical(os.path.join(cwd, a.rstrip("/"))) == target for a in named)


def visible_mount(mountpoint: str) -> tuple[str, str] | None:
    """The file-system type and the source (a FUSE mount's ``fsname``: ``datahub:<specs>`` for a
    version mount) of what is mounted exactly at ``mountpoint``, or None: nothing is. Why: a
    caller about to unmount a mount point it did not mount names what is there when it refuses."""
    found = top_mount(canonical(mountpoint))
    return (found.fstype, found.source) if found is not None else None


def check_mountpoint(mountpoint: str, home: Path | None = None) -> str:
    """The canonical mount point, ready to mount on: an existing empty directory, not mounted.

    A FUSE mount left there by a daemon that died (kill -9, OOM) is stale: its directory
    answers ENOTCONN. It is detached here (lazily, as ``datahub umount`` does), logged, and
    its record dropped, so mounting again is the way to recover (a workspace replays its
    journal when opened). A live mount, ours or anyone's, is never touched: Conflict.
    """
    path = canonical(mountpoint)
    top = top_mount(path)
    if top is not None:
        record = read_record(home, path) if home is not None else None
        live = record is not None and is_mount_daemon(record.pid, path)
        # a datahub mount's only: a user's own FUSE mount whose daemon died stays theirs (gaps26)
        ours = top.datahub and top.root == "/"
        if not live and ours and is_stale(path):
            fusermount_detach(path, lazy=True)
            log.warning(
                "%s was a stale mount point (its daemon%s died: ENOTCONN); detached it before mounting",
                mountpoint,
                f" pid {record.pid}" if record is not None else "",
            )
            if record is not None:
                remove_record(home, path)  # type: ignore[arg-type]
        elif ours:
            raise Conflict(f"{mountpoint} is already a mount point: run `datahub umount {mountpoint}` first")
        else:
            raise Conflict(
                f"{mountpoint} is already a mount point ({top.described()}), not a datahub mount: "
                "mount on another directory, or unmount it with its own tool first"
            )
    if not os.path.isdir(path):
        _refuse_no_directory(mountpoint, path)
    if is_mounted(path):
        raise Conflict(f"{mountpoint} is already a mount point: run `datahub umount {mountpoint}` first")
    held = _some_entries(path)
    if held:
        raise InvalidInput(
            f"mount point {mountpoint} is not empty (it holds {held}): mount on an empty directory; "
            "mounted over, its own files would be hidden until the unmount"
        )
    return path


def _refuse_no_directory(mountpoint: str, path: str) -> NoReturn:
    """InvalidInput for a mount point ``path`` that is no directory, saying what it is instead.

    Why three answers: a file was told "create it first" too, which it already was (newuser28);
    and a path that cannot be reached (a file above it: ENOTDIR; a directory above it this
    user may not enter: EACCES) was told it "does not exist" and to ``mkdir -p`` it, which
    fails there the same way (review29)."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        raise InvalidInput(
            f"mount point {mountpoint} does not exist: create it first (mkdir -p {mountpoint})"
        ) from None
    except OSError as exc:
        raise InvalidInput(
            f"mount point {mountpoint} cannot be reached ({exc.strerror}): a directory above it is a "
            "file, or one this user may not enter; mount on an empty directory this user can reach"
        ) from None
    raise InvalidInput(
        f"mount point {mountpoint} is not a directory: mount on an empty directory (mkdir DIR), not on a file"
    )


def _some_entries(path: str, most: int = 3) -> str:
    """A few names a directory holds, for a message ("" when empty).

    A directory its user may not list is refused: fusermount3 asks only for write access to
    the mount point, so a mode 0300 directory mounted, and the files it held were hidden
    until the unmount (review14b). Unlistable, it cannot be known empty."""
    try:
        with os.scandir(path) as entries:
            names = [entry.name for _, entry in zip(range(most + 1), entries, strict=False)]
    except PermissionError as exc:
        raise InvalidInput(
            f"mount point {path} cannot be listed ({exc.strerror}), so it cannot be known empty: mount on "
            "an empty directory you may read; mounted over, its own files would be hidden until the unmount"
        ) from exc
    shown = ", ".join(repr(name) for name in names[:most])
    return shown + (", …" if len(names) > most else "")


def fusermount_detach(mountpoint: str, *, lazy: bool) -> None:
    tool = shutil.which("fusermount3") or shutil.which("fusermount") or "fusermount3"
    args = [tool, "-u", *(["-z"] if lazy else []), mountpoint]
    proc = subprocess.run(args, capture_output=True, text=True)
    if proc.returncode != 0 and is_mounted(mountpoint):
        raise DatahubError(f"could not unmount {mountpoint}: {proc.stderr.strip() or proc.returncode}")


# --- background start -----------------------------------------------------------------------------
def spawn_until_ready(
    args: Sequence[str], log_path: Path, *, timeout: float, env: Mapping[str, str] | None = None
) -> tuple[subprocess.Popen, bool]:
    """Start ``python -m fuse_adapter <args> --foreground --ready-fd N`` detached and wait until it serves.

    A re-executed child (not a fork) so no threads or open connections are duplicated; its own
    session, so a signal to the caller's process group does not stop the mount. Returns the
    process and whether it signalled ready (False: it exited before mounting, or timed out).
    """
    read_fd, write_fd = os.pipe()
    _private(log_path.parent)
    cmd = [sys.executable, "-m", "fuse_adapter", *args, "--foreground", "--ready-fd", str(write_fd)]
    with open(log_path, "ab") as logf:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=logf,
            pass_fds=(write_fd,),
            start_new_session=True,
            env=None if env is None else dict(env),
        )
    os.close(write_fd)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([read_fd], [], [], 0.2)
            if ready:
                return proc, os.read(read_fd, len(READY)) == READY  # b"": it exited before mounting
            if proc.poll() is not None:
                return proc, False
        return proc, False
    finally:
        os.close(read_fd)


def start_background(argv: Sequence[str], log_path: Path, timeout: float = 60.0) -> int:
    """Run ``datahub <argv>`` as a detached mount daemon; return its pid once mounted."""
    start = log_path.stat().st_size if log_path.exists() else 0
    proc, ready = spawn_until_ready(argv, log_path, timeout=timeout)
    if ready:
        return proc.pid
    if proc.poll() is None:
        proc.terminate()
        proc.wait()
    # the daemon's exit code is its error's (a workspace open elsewhere: 4): keep it
    raise error_for_exit_code(
        proc.returncode, "the mount did not start: " + (why_not_started(log_path, start) or f"see {log_path}")
    )


def why_not_started(log_path: Path, start: int, lines: int = 5) -> str:
    """What a daemon that did not start wrote to its log from byte ``start`` on, as one line.

    Only this start's lines: the log of a mount point is appended to by every start, so its
    last lines may be an earlier try's error (a typo fixed since). The daemon's own error
    lines (``error: ...``) are the reason when it wrote any, without their prefix (the
    caller says ``error:`` once); else its last ``lines`` lines.
    """
    with open(log_path, "rb") as fh:
        fh.seek(start)
        written = fh.read().decode(errors="replace").strip().splitlines()
    errors = [line.removeprefix("error: ") for line in written if line.startswith("error: ")]
    return " | ".join(errors or written[-lines:])


def signal_ready(fd: int | None) -> None:
    if fd is None:
        return
    try:
        os.write(fd, READY)
    finally:
        os.close(fd)


# --- long-lived objects -------------------------------------------------------------------------
def freeze_long_lived() -> int:
    """Move every object alive now out of the cyclic GC's reach (``gc.freeze``); returns how many
    are frozen.

    Why: a serving daemon keeps ~95,000 tracked objects for good (botocore's endpoint and S3
    model data, loaded with the first S3 client, the modules, the mount's tables), and every
    full (gen-2) collection walked them all: 45-400 ms with the GIL held, triggered every few
    thousand SSD-tier hits by the hits thread's allocations (docs/benchmarks.md, issue 36).
    Frozen, a collection walks only what was allocated since. Called once what the daemon
    needs for good exists (the stores opened); a ``gc.collect()`` first, so no garbage of the
    start-up is frozen with it. What is frozen is still freed by reference counting; only a
    cycle among frozen objects that dies later is never collected, and the start-up leaves none
    that matter (the objects frozen are module and model data the daemon keeps).
    """
    gc.collect()
    gc.freeze()
    frozen = _FROZEN[0] = gc.get_freeze_count()
    log.info("gc: %d long-lived objects frozen (full collections no longer scan them)", frozen)
    return frozen


#: the count :func:`freeze_long_lived` saw: ``gc.get_freeze_count()`` walks every frozen object
#: (~96,000: milliseconds of daemon CPU), too much for a stats snapshot every 2 s
_FROZEN = [0]


def frozen_objects() -> int:
    """How many objects :func:`freeze_long_lived` froze (0: not yet)."""
    return _FROZEN[0]


# --- unmount --------------------------------------------------------------------------------------
def _exit_waiter(pid: int) -> Callable[[float | None], None]:
    """A function that waits at most its argument (s) for ``pid`` to exit, and with ``None``
    releases what it waits on.

    Why: ``datahub umount`` (a CSI unpublish) waited for the stopped daemon in sleeps of 50 ms,
    on average 25 ms after it had exited; a pidfd (Linux 5.3) is readable the moment it exits.
    Without one (an older kernel, a seccomp filter) the wait is the sleep it was."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        return lambda seconds: time.sleep(seconds) if seconds else None

    def wait(seconds: float | None) -> None:
        nonlocal fd
        if fd < 0:
            return
        if seconds is None:
            os.close(fd)
            fd = -1
            return
        select.select([fd], [], [], seconds)

    return wait


@dataclass(frozen=True)
class Unmounted:
    """What ``unmount`` did (``outcome``, in words), and whether a workspace's files are known
    flushed and committed (``finished``: its daemon said so, or ``recover`` ran and returned)."""

    outcome: str
    finished: bool = False


def unmount(
    home: Path,
    mountpoint: str,
    *,
    timeout: float = 600.0,
    recover: Callable[[MountRecord], str | None] | None = None,
) -> Unmounted:
    """Stop the daemon of ``mountpoint`` cleanly, or clean up after a dead one. Returns what it did,
    with what ``recover`` said it did (a workspace: flushed, and which version holds its files).

    ``recover`` is skipped when the stopped daemon itself said its final flush and commit
    succeeded (``write_finished``): reopening the workspace would replay its journal, take its
    lease and find nothing to do, and cost a CSI unpublish seconds (unpublish15)."""
    path = canonical(mountpoint)
    record = read_record(home, path)
    # only what `datahub mount` mounted: never a user's sshfs, FUSE file system or a bind (gaps26)
    refused = whose_mount.refusal(
        mountpoint, path, recorded=lambda point: read_record(home, point) is not None
    )
    if refused is not None:
        raise refused
    if record is not None and is_mount_daemon(record.pid, path):
        _take_finished(home, path, 0)  # a word left by an earlier daemon here is not this one's
        exited = _exit_waiter(record.pid)  # before the signal: the pid is the checked daemon's
        try:
            os.kill(record.pid, signal.SIGTERM)  # the daemon flushes (rw) and unmounts itself
            deadline = time.monotonic() + timeout
            while pid_alive(record.pid):
                left = deadline - time.monotonic()
                if left < 0:
                    raise DatahubError(
                        f"the mount daemon of {mountpoint} (pid {record.pid}) did not stop within "
                        f"{timeout:.0f}s; it may still be flushing: retry, or check its log"
                    )
                exited(min(left, 0.05))
        finally:
            exited(None)
        if is_mounted(path):
            fusermount_detach(path, lazy=True)
        remove_record(home, path)
        said = _take_finished(home, path, record.pid)
        if said is not None:  # written after its flush, commit and close all succeeded
            return Unmounted(f"stopped: {said}", finished=True)
        outcome = "stopped"
        if recover is None:
            return Unmounted(outcome)
        # The daemon is not our child, so its exit status is unknown, and it did not say it
        # finished: re-check its final flush (flushed again here; a failure reaches the user).
        said = recover(record)
        return Unmounted(outcome + (f": {said}" if said else ""), finished=True)
    outcome = "not mounted"
    if is_mounted(path):
        stale = is_stale(path)
        fusermount_detach(path, lazy=stale)
        outcome = "cleaned stale mount" if stale else "unmounted"
    finished = False
    if record is not None:
        if recover is not None:
            said = recover(record)  # e.g. replay the journal of a crashed workspace and flush it
            outcome += f" and recovered: {said}" if said else " and recovered"
            finished = True
        remove_record(home, path)
        _take_finished(home, path, 0)  # a dead daemon's word is never trusted: recover re-checked
    return Unmounted(outcome, finished)
