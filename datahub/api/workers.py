"""Several API server processes on one listening socket: pre-fork, supervised, no orphans.

One Python process serves requests on one core at a time (the GIL), so ``datahub serve
--workers N`` forks N processes that accept on the socket the parent bound (the kernel
hands each connection to one of them). Why fork and not uvicorn's own ``--workers``: the
parent checks the bind (local mode only on loopback, a busy port is one clear error) before
any worker exists, and each worker opens its own catalog connection, object-store clients
and cache *after* the fork, so no SQLite handle, LMDB environment or thread crosses it.

What stays correct across workers:
- SQLite (WAL, busy timeout) and MongoDB serialise commits across processes; a commit
  answered by one worker is visible to the next request whichever worker takes it.
- The disk cache tier is shared by design (an LMDB index with one holder entry per process).
- Per process, by design and documented: the RAM tier, the in-flight body budget
  (``api.max_inflight_body_bytes`` is per worker, so N workers admit up to N budgets), and
  ``/metrics`` (each answer is that worker's counters, labelled with its pid).

Supervision: a worker that dies is replaced (its in-flight requests fail, the others go on);
one that keeps dying at start stops the whole server with a clear error instead of looping.
SIGTERM/SIGINT/SIGHUP to the parent stops every worker gracefully, then kills stragglers (SIGHUP
is a stop, as for one process: its terminal closed; left to its default, it killed the parent
with a traceback-less signal status, no "stopped" line, and workers stopped only by their
death signal). Each worker
asks the kernel for SIGTERM when the parent dies (``PR_SET_PDEATHSIG``), so even a
``kill -9`` of the parent leaves no orphan serving stale configuration.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable

from datahub.console.context import shown
from datahub.errors import DatahubError, InvalidInput

log = logging.getLogger(__name__)

MAX_WORKERS = 64
GRACEFUL_SECONDS = 10.0
_PR_SET_PDEATHSIG = 1
_FAST_DEATH_SECONDS = 5.0  # a worker dying sooner than this after its start is a failed start
_MAX_FAILED_STARTS = 3
# what stops the server: Ctrl-C, a stop, its terminal closed (the same as one process's)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def check_workers(n: int) -> int:
    if not 1 <= n <= MAX_WORKERS:
        raise InvalidInput(
            f"invalid --workers {n}: use 1..{MAX_WORKERS} (one per core is a good start)", workers=n
        )
    return n


def serve_workers(n: int, sock: socket.socket, run_worker: Callable[[socket.socket], int]) -> int:
    """Fork ``n`` workers running ``run_worker(sock)`` and supervise them until SIGTERM/SIGINT/SIGHUP.

    ``run_worker`` runs in the child and must return when the child gets SIGTERM. Returns 0
    after a requested stop, 1 if workers kept failing at start.
    """
    check_workers(n)
    stopping: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        stopping.append(signum)

    previous = {s: signal.signal(s, on_signal) for s in STOP_SIGNALS}
    started: dict[int, float] = {}
    failed_starts = 0
    code = 0
    try:
        for _ in range(n):
            pid = _fork_worker(sock, run_worker)
            started[pid] = time.monotonic()
        while not stopping:
            pid, status = _reap()
            if pid == 0:
                time.sleep(0.1)
                continue
            lived = time.monotonic() - started.pop(pid, 0.0)
            failed_starts = failed_starts + 1 if lived < _FAST_DEATH_SECONDS else 0
            log.warning("API worker %d exited (%s) after %.1fs", pid, _describe(status), lived)
            if failed_starts >= _MAX_FAILED_STARTS:
                print(
                    f"datahub serve: {failed_starts} workers in a row died within "
                    f"{_FAST_DEATH_SECONDS:.0f}s of starting; stopping (see the log above)",
                    file=sys.stderr,
                )
                code = 1
                break
            pid = _fork_worker(sock, run_worker)
            started[pid] = time.monotonic()
    finally:
        _stop_all(list(started))
        for s, handler in previous.items():
            signal.signal(s, handler)
    return code


def _fork_worker(sock: socket.socket, run_worker: Callable[[socket.socket], int]) -> int:
    parent = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:  # the child: never returns into the parent's code
        for s in STOP_SIGNALS:  # until run_worker sets its own: a stop before it is a plain exit
            signal.signal(s, signal.SIG_DFL)
        _die_with_parent(parent)
        code = run_worker(sock)
    except DatahubError as exc:
        # shown: the message may quote a user's string, which must not reach the terminal raw
        print(f"datahub serve worker {os.getpid()}: {shown(str(exc))}", file=sys.stderr)
    except BaseException:
        log.exception("API worker %d failed", os.getpid())
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _die_with_parent(parent: int) -> None:
    """SIGTERM this process when the parent dies (Linux); exit now if it already did."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the parent's stop still reaches workers
        return
    if os.getppid() != parent:
        os._exit(0)


def _reap() -> tuple[int, int]:
    try:
        return os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return 0, 0


def _stop_all(pids: list[int]) -> None:
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + GRACEFUL_SECONDS
    alive = set(pids)
    while alive and time.monotonic() < deadline:
        for pid in list(alive):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                alive.discard(pid)
        time.sleep(0.05)
    for pid in alive:
        log.warning("API worker %d did not stop within %.0fs: killing it", pid, GRACEFUL_SECONDS)
        _signal(pid, signal.SIGKILL)
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}"
    return f"exit code {os.waitstatus_to_exitcode(status)}"
