"""Process lifetimes: is a process (named by a PID recorded in a file or an index) still
alive, and what this process closes when it exits.

Cache processes, mount daemons and the CSI plugin all leave PIDs behind and must tell a
live holder from a dead one after a crash; ``pid_alive`` is the one answer they share.
``at_exit`` is how what holds such a claim (an open cache) gives it back at exit, however the
process ends.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


def pid_alive(pid: int) -> bool:
    """True if ``pid`` runs (owned by anyone); a zombie counts as dead."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, just not ours
    with contextlib.suppress(OSError), open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    return True


_hooks: dict[int, Callable[[], object]] = {}  # id(hook) -> hook, in registration order
_hooks_lock = threading.Lock()
_hooked_pid = 0  # the process whose exit runs ``_hooks`` (0: none registered yet)


def at_exit(hook: Callable[[], object]) -> None:
    """Run ``hook`` when this process exits, newest first, once: at interpreter exit
    (``atexit``), or when a ``multiprocessing`` child ends, whose last act is
    ``multiprocessing.util._exit_function`` (it runs the finalizers) and then ``os._exit``,
    which runs no ``atexit`` hook.

    Why: a torch DataLoader worker is such a child. Its cache's exit hook never ran, so it
    left its claim on the disk index behind with its batched inserts unwritten, and the next
    epoch's workers, finding a dead holder, rebuilt the index from every page file. Hooks
    registered in a parent are not run in a forked child (they are the parent's)."""
    global _hooked_pid
    import multiprocessing.util  # here: the mount and catalog commands import this module, not it

    with _hooks_lock:
        if _hooked_pid != os.getpid():
            _hooks.clear()  # inherited through fork: the parent's
            atexit.register(_run_hooks)
            multiprocessing.util.Finalize(None, _run_hooks, exitpriority=10)
            _hooked_pid = os.getpid()
        _hooks[id(hook)] = hook


def cancel_at_exit(hook: Callable[[], object]) -> None:
    """Forget ``hook`` (its owner was closed already); nothing if it is not registered."""
    with _hooks_lock:
        if _hooked_pid == os.getpid() and _hooks.get(id(hook)) is hook:
            del _hooks[id(hook)]


def _run_hooks() -> None:
    while True:
        with _hooks_lock:
            if _hooked_pid != os.getpid() or not _hooks:
                return  # run already, or the parent's (an inherited atexit in a forked child)
            _, hook = _hooks.popitem()
        try:
            hook()
        except Exception:  # one failing hook must not keep the others from running
            log.exception("exit hook %r failed", hook)


def _after_fork_in_child() -> None:
    """A fresh lock: a parent thread may have held it at the fork."""
    global _hooks_lock
    _hooks_lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)
