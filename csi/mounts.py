"""The node's hands: the FUSE mount process of a volume, bind mounts, health checks.

Each staged volume (and each target published without staging) gets one mount process:
``python -m fuse_adapter mount`` in the foreground (the FUSE engineer's daemon, driven
through its CLI like a user would), mounted on a private directory under the plugin's state
dir. The part of that view a pod should see (``<dataset>/v<N>/<prefix>`` of a version view,
the root of a bucket or workspace view) is then bind-mounted onto the CO's staging path and
onto every target published from it, read-only when the volume or the request is read-only.
Stopping is ``fuse_adapter.daemon.unmount`` (what ``datahub umount`` runs), called here rather
than as a second interpreter (~0.5 CPU-s of start and imports per unpublish, unpublish15): the
daemon flushes a workspace (and commits it) before it unmounts, and says whether that succeeded.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from csi import beneath
from datahub import mountinfo
from datahub.config import load_config
from datahub.errors import AccessDenied, Conflict, DatahubError, InvalidInput, NotFound, StorageError
from fuse_adapter.daemon import (
    DEAD_DAEMON_ERRNOS,
    MountRecord,
    Unmounted,
    canonical,
    fusermount_detach,
    is_mounted,
    pid_alive,
    spawn_until_ready,
    why_not_started,
)
from fuse_adapter.daemon import unmount as stop_daemon

log = logging.getLogger(__name__)

# exit codes of the datahub CLI (datahub.errors) -> the error class, so a failed mount
# process surfaces as the same kind of error it raised
_EXIT_ERRORS: dict[int, type[DatahubError]] = {
    2: InvalidInput,
    3: NotFound,
    4: Conflict,
    6: AccessDenied,
    7: StorageError,
}


def _run(cmd: Sequence[str], what: str) -> None:
    proc = subprocess.run(list(cmd), capture_output=True, text=True)
    if proc.returncode != 0:
        raise DatahubError(f"{what} failed: {proc.stderr.strip() or proc.returncode}")


def bind(source: str, target: str, *, readonly: bool) -> None:
    """Bind ``source`` onto ``target`` (then remount it read-only: one step is not enough)."""
    _run(["mount", "--bind", source, target], f"bind-mounting {source} on {target}")
    if readonly:
        try:
            _run(["mount", "-o", "remount,bind,ro", target], f"making {target} read-only")
        except DatahubError:
            unmount(target, lazy=True)  # never leave a writable target behind
            raise


def replace(source: str, target: str, *, readonly: bool) -> None:
    """Bind ``source`` onto the mount point ``target`` in place of what is mounted there (the
    view of a dead mount process) without the target ever being its bare directory.

    The new bind goes beneath the old top, which is then detached (csi/beneath.py). A kernel
    without MOVE_MOUNT_BENEATH (before Linux 6.5) gets the old order, logged: unmount, then
    bind, and for that moment a propagating container sees (and writes into) the directory.
    """
    if beneath.bind_beneath(source, target, readonly=readonly):
        unmount(target, lazy=True)  # the dead top; the new view beneath it is uncovered
        return
    log.warning("this kernel cannot mount beneath %s (Linux 6.5 can): unmounting it before binding "
                "the new view; until then the target is a plain directory", target)  # fmt: skip
    unmount(target, lazy=True)
    bind(source, target, readonly=readonly)


def unmount(path: str, *, lazy: bool = False) -> None:
    """Unmount ``path`` if it is a mount point (lazy: detach even if busy or dead)."""
    if not is_mounted(path):
        return
    proc = subprocess.run(["umount", *(["-l"] if lazy else []), path], capture_output=True, text=True)
    if proc.returncode != 0 and is_mounted(path):
        raise Conflict(
            f"could not unmount {path}: {proc.stderr.strip()}; a process may still use it "
            "(the CO retries NodeUnpublishVolume)"
        )


def mount_points() -> set[str]:
    """Every mount point of this mount namespace, read from /proc/self/mountinfo once.

    A node running many pods has thousands of mounts; the supervisor checks all its volumes
    against one read instead of reading the table again for every path.
    """
    return {entry.point for entry in mountinfo.mount_entries()}


def mount_entries() -> list[tuple[str, str, str]]:
    """(mount point, device major:minor, filesystem type) of every mount, from mountinfo."""
    return [(entry.point, entry.device, entry.fstype) for entry in mountinfo.mount_entries()]


def foreign_mount(path: str, own_root: str) -> str | None:
    """The filesystem type of the mount at ``path`` if it is not one of ours, else None.

    Ours means a bind of a mount under ``own_root`` (the plugin's state dir, where every
    volume's FUSE mount lives): the bind shows the same device as its source. A tmpfs, a
    host path or another driver's mount has a device of its own.
    """
    path, own_root = canonical(path), canonical(own_root).rstrip("/") + "/"
    entries = mount_entries()
    here = [(dev, fstype) for point, dev, fstype in entries if point == path]
    if not here:
        return None
    dev, fstype = here[-1]  # the top of the stack is what the pod (and umount) would see
    ours = {d for point, d, _ in entries if point.startswith(own_root)}
    return None if dev in ours else fstype


def health(path: str, points: set[str] | None = None) -> str:
    """Returns "ok", "unmounted" or "broken" (ENOTCONN and the like, ``DEAD_DAEMON_ERRNOS``:
    the FUSE daemon behind the mount died).

    ``points`` (from :func:`mount_points`) saves reading the mount table again. statfs
    always reaches the FUSE daemon (the kernel caches attributes, not statfs), and it is
    cheap, unlike listing a directory of a million files.
    """
    mounted = canonical(path) in points if points is not None else is_mounted(path)
    if not mounted:
        return "unmounted"
    try:
        os.statvfs(path)
    except OSError as exc:
        if exc.errno in DEAD_DAEMON_ERRNOS or exc.errno == errno.EIO:
            return "broken"
        raise
    return "ok"


def detach_stale(path: str) -> None:
    """Lazily detach a mount whose daemon died (fusermount3 -uz; a no-op if unmounted)."""
    if is_mounted(path):
        fusermount_detach(path, lazy=True)


_PASSED_ON = ("DATAHUB_LOG", "DATAHUB_API_TOKEN")  # the plugin's DATAHUB_* variables a mount process gets


class MountProcess:
    """``python -m fuse_adapter --config CFG mount STAGING ARGS --foreground``, supervised."""

    def __init__(self, config_path: str, staging: str, log_path: str) -> None:
        self.config_path = config_path
        self.staging = staging
        self.log_path = log_path

    def _env(self) -> dict[str, str]:
        # the volume's config file is the whole truth: DATAHUB_* variables of the plugin would
        # override it (and could carry credentials the volume should not get). Kept: the log
        # level, and the plugin's API token, which is no setting (the config file has no place
        # for it): with an http(s) catalog the mount process reads the catalog the plugin
        # checked the pod against, as the plugin (without it every mount got 401)
        env = {k: v for k, v in os.environ.items() if not k.startswith("DATAHUB_") or k in _PASSED_ON}
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def start(self, mount_args: Sequence[str], *, timeout: float) -> subprocess.Popen:
        """Start the daemon and return once it serves; raise the daemon's error if it does not."""
        Path(self.staging).mkdir(parents=True, exist_ok=True)
        args = ["--config", self.config_path, "mount", self.staging, *mount_args]
        log = Path(self.log_path)
        start = log.stat().st_size if log.exists() else 0  # every start appends to this log
        proc, ready = spawn_until_ready(args, log, timeout=timeout, env=self._env())
        if ready:
            return proc
        self.kill(proc)
        detach_stale(self.staging)
        tail = why_not_started(log, start) if log.exists() else ""
        error = _EXIT_ERRORS.get(proc.returncode or 0, DatahubError)
        raise error(f"the mount process failed (exit {proc.returncode}): {tail or 'see ' + self.log_path}")

    @staticmethod
    def kill(proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait()

    def stop(
        self, *, timeout: float, recover: Callable[[MountRecord], str | None] | None = None
    ) -> Unmounted:
        """SIGTERM the daemon and wait (a workspace's flushes and commits), then unmount; works for a
        dead daemon too. ``finished`` in the answer: the daemon said its final flush and commit
        succeeded (else the caller re-checks the workspace: ``csi/finish.py``), or ``recover``
        (given the daemon's record) ran."""
        home = load_config(self.config_path, env={}).home_path  # where the daemon left its record
        return stop_daemon(home, self.staging, timeout=timeout, recover=recover)


def wait_exit(pid: int, proc: subprocess.Popen | None, timeout: float) -> bool:
    """Wait for a mount process to end (reaping it if it is our child)."""
    if proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout)
        return proc.poll() is not None
    deadline = time.monotonic() + timeout
    while pid and pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
