"""The fork gate: no transaction of the parent (LMDB, SQLite) is open in a child.

SQLite pools (``datahub.sqlite_pool``) take their connections through ``using`` too, and
close their idle connections once the gate is quiet (``on_quiet``): see that module for why.
What follows is LMDB's side.

Why: a forked child (a torch DataLoader worker) inherits every LMDB handle of its parent, and
LMDB forbids using one in a child. py-lmdb lets a process open an environment's files once, so
a child that wants its own handle (its disk cache index, a shard) must close the inherited one
first (``close_inherited``), and so does the garbage collector when the child drops it. Closing
a handle aborts every transaction the child inherited with it: a read transaction a parent
thread had open at the fork gave up the PARENT's slot in the reader table the processes share
(its snapshot then read pages a writer had reused: wrong bytes), and an operation or write
transaction in flight at the fork was waited for, in the child, for ever (it hung).

So every transaction of an environment registered here is taken through ``transaction`` (or a
section through ``using``), and a fork waits until none is open in another thread (at most
``FORK_WAIT`` seconds: a transaction that outlives that is named in a warning) while none may
begin. A child then holds handles without open transactions, which it may close; one that a
transaction still held at the fork is kept, never closed (``close_inherited`` says so).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

log = logging.getLogger(__name__)

FORK_WAIT = 30.0  # seconds a fork waits for the other threads' open transactions

_lock = threading.Lock()  # taken directly on a section's way in and out (the cheap path)
_cond = threading.Condition(_lock)
_open: dict[tuple[int, int], int] = {}  # (thread ident, id(env)) -> sections open
_forking = False
_open_at_fork: set[int] = set()  # in a child: id() of the inherited envs a transaction held at the fork
_kept: list[Any] = []  # in a child: those envs, referenced for ever (closing them is what must not happen)


class using:  # used as a function: ``with using(env):``
    """A section of this thread that opens transactions of ``env`` (or closes it): no fork
    happens inside it. Sections nest, and a thread already inside one enters more while a
    fork waits (it must finish the outer one for the fork to go on).

    A class, not a generator: SQLite pools enter one per lease, and the generator's frame
    and context-manager wrapper were most of the section's cost."""

    __slots__ = ("_env", "_me")

    def __init__(self, env: Any) -> None:
        self._env = env
        self._me = (threading.get_ident(), id(env))

    def __enter__(self) -> Any:
        me = self._me
        with _lock:
            while _forking and not any(t == me[0] for t, _ in _open):
                _cond.wait()
            _open[me] = _open.get(me, 0) + 1
        return self._env

    def __exit__(self, *exc: object) -> None:
        me = self._me
        with _lock:
            left = _open[me] - 1
            if left <= 0:
                del _open[me]
            else:
                _open[me] = left
            if _forking:  # only a fork waits on the other threads' sections
                _cond.notify_all()


@contextmanager
def transaction(env: Any, **kwargs: Any) -> Iterator[Any]:
    """``env.begin(**kwargs)`` as a context (committed on success, aborted on error), inside
    ``using(env)``."""
    with using(env), env.begin(**kwargs) as txn:
        yield txn


def close_inherited(env: Any) -> bool:
    """In a forked child: close the parent's handle ``env`` so that this process may open the
    files itself. False, and ``env`` is kept open and never closed, when a parent thread had a
    transaction of it open at the fork (closing it would abort that transaction in the reader
    table the processes share)."""
    if id(env) in _open_at_fork:
        _kept.append(env)
        return False
    env.close()
    return True


_quiet_hooks: list[Callable[[], None]] = []


def on_quiet(hook: Callable[[], None]) -> None:
    """Run ``hook`` at every fork once the other threads' sections have ended (or the wait
    gave up), while none may begin: what must not be open at a fork is closed there."""
    _quiet_hooks.append(hook)


def held_at_fork(handle: Any) -> bool:
    """In a forked child: whether a section of ``handle`` was open in a parent thread at the
    fork (the wait gave up on it)."""
    return id(handle) in _open_at_fork


def _before_fork() -> None:
    """Hold new transactions back and wait (``FORK_WAIT`` at most) for the other threads' to
    end, then run the ``on_quiet`` hooks."""
    global _forking
    _cond.acquire()
    _forking = True
    me = threading.get_ident()
    deadline = time.monotonic() + FORK_WAIT
    while any(t != me for t, _ in _open):
        left = deadline - time.monotonic()
        if left <= 0:
            log.warning(
                "fork: %d LMDB or SQLite transaction(s) of other threads still open after %.0fs; the "
                "child keeps those handles and never closes them (it cannot open their files itself)",
                sum(n for (t, _), n in _open.items() if t != me),
                FORK_WAIT,
            )
            break
        _cond.wait(left)
    for hook in _quiet_hooks:
        try:
            hook()
        except Exception:  # a fork must go on: the hook's owner is named
            log.exception("fork: the quiet hook %r failed", hook)


def _after_fork_in_parent() -> None:
    global _forking
    _forking = False
    _cond.notify_all()
    _cond.release()


def _after_fork_in_child() -> None:
    global _lock, _cond, _open, _forking, _open_at_fork
    _open_at_fork = _open_at_fork | {env for _, env in _open}
    _open, _forking = {}, False
    _lock = threading.Lock()
    _cond = threading.Condition(_lock)


os.register_at_fork(
    before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child
)
