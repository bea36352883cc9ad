"""Process lifetimes: is a process (named by a PID recorded in a file or an index) still
alive, what this process closes when it exits, and what a forked child must not share.

Cache processes, mount daemons and the CSI plugin all leave PIDs behind and must tell a
live holder from a dead one after a crash; ``pid_alive`` is the one answer they share.
``at_exit`` is how what holds such a claim (an open cache) gives it back at exit, however the
process ends.

``PerProcess`` is the one way a resource that must not cross a ``fork`` (pooled keep-alive
sockets, SQLite connections, a MongoDB client, a librados cluster handle, a lock another
thread may hold) is held: each process makes its own on first use, and a forked child leaves
the parent's alone (``keep_inherited``: referenced for ever, never used, closed or
collected). Why: a torch
DataLoader worker (start method "fork") uses objects its parent opened. Through one pooled
socket a parent and a child read each other's answers (wrong bytes); SQLite forbids using,
or even closing, a connection opened before the fork in the child (its locks and WAL-index
state are per process); a lock a parent thread held at the fork is held for ever in the
child. Closing the parent's copy in the child is no answer either: a TLS or SQLite close
talks to the peer or the database on the parent's behalf.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import logging
import os
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")


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


# In a forked child: the parent's resources, referenced for ever. The list is given one
# reference more than Python counts, so that not even the interpreter's finalization (a child
# that returns normally) deallocates it: a dealloc closes an SQLite connection, and SQLite's
# close in the child may checkpoint or delete the WAL under the parent.
_INHERITED: list[object] = []
ctypes.pythonapi.Py_IncRef(ctypes.py_object(_INHERITED))
_per_process_lock = threading.RLock()  # makes a PerProcess value once; a fresh one after a fork


def keep_inherited(*resources: object) -> None:
    """Keep a parent's ``resources`` (in a forked child) referenced for ever, never closed:
    see the module doc. None is skipped."""
    _INHERITED.extend(r for r in resources if r is not None)


class PerProcess(Generic[T]):
    """A resource of the process that made it: ``get`` answers this process's, made by
    ``make`` on first use in each process; in a forked child the parent's is kept, never
    used or closed (``keep_inherited``). The check is one ``os.getpid()`` per ``get``.

    ``make`` runs once per process (under a lock of the process, re-entrant: a ``make`` may
    get other PerProcess values), and its exception reaches the caller of ``get``."""

    __slots__ = ("_held", "_inherited", "_make")

    def __init__(self, make: Callable[[], T], *, inherited: Callable[[T], None] | None = None) -> None:
        """``inherited``: called in a forked child with the parent's value before the child
        makes its own; what it raises reaches every ``get`` of the child (the child may not
        have one: an SQLite file whose connections the parent held at the fork)."""
        self._make = make
        self._inherited = inherited
        # (the process whose value it is (0: none yet), the value): one attribute, read and
        # written whole. Why: as two, a ``get`` that had read the PID when another thread's
        # ``drop`` (a store's ``close``) ran then read the value None and answered it, and its
        # caller failed with AttributeError on None instead of the closed store's error
        self._held: tuple[int, T | None] = (0, None)

    def get(self) -> T:
        """This process's value, made now if this process has none yet."""
        pid, value = self._held
        if pid == os.getpid():
            return value  # type: ignore[return-value]
        with _per_process_lock:
            pid = os.getpid()
            held_by, value = self._held
            if held_by != pid:
                if held_by:
                    if self._inherited is not None:
                        self._inherited(value)  # type: ignore[arg-type]
                    keep_inherited(value)  # the parent's: never touched here
                self._held = (0, None)
                value = self._make()
                self._held = (pid, value)
        return value  # type: ignore[return-value]

    def current(self) -> T | None:
        """This process's value if it made one, else None (never the parent's): what a
        ``close`` closes."""
        pid, value = self._held
        return value if pid == os.getpid() else None

    def drop(self) -> T | None:
        """Forget this process's value and answer it (the caller closes it); None if it has
        none. The next ``get`` makes another."""
        with _per_process_lock:
            value = self.current()
            if value is not None:
                self._held = (0, None)
            return value


def _after_fork_in_child() -> None:
    """Fresh locks: a parent thread may have held them at the fork."""
    global _hooks_lock, _per_process_lock
    _hooks_lock = threading.Lock()
    _per_process_lock = threading.RLock()


os.register_at_fork(after_in_child=_after_fork_in_child)
