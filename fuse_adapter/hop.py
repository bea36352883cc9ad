"""The workspace mount's hop from the request loop to a thread, for requests that block.

Why not ``trio.to_thread.run_sync``: every small file's FLUSH makes this hop (the pack's and
the journal's flushes block), and trio's costs 70-90 µs of CPU a call on this machine
against 30-45 µs for this one with the trio side ``fuse_ops.WorkspaceOps._thread`` adds
(``bench/writeback/hop_cost.py``): trio takes a limiter token through a checkpoint, copies
the context variables, names the worker thread before and after each job (two ``prctl``
calls), captures the outcome in an ``outcome`` object and delivers it through its
from-thread message loop. None of that is needed here: no workspace handler calls back
into trio, and none may be abandoned anyway (a journal write must finish).

What stays as with trio's limiter: at most ``threads`` jobs run at once, the others wait
their turn in order. Threads are started when no idle one is left (up to ``threads``) and
live as long as the process (daemon threads, as trio's cached ones). No trio here: the
caller passes ``done``, which the thread calls after the job (``fuse_ops`` wakes the
waiting task with it), so this module stays outside the layer that may import trio
(``tests/test_layering.py``).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class Job:
    """One call: ``result`` or ``error`` once ``done`` was called."""

    __slots__ = ("fn", "args", "kwargs", "done", "result", "error")

    def __init__(self, fn: Callable[..., Any], args: tuple, kwargs: dict, done: Callable[[], None]) -> None:
        self.fn, self.args, self.kwargs, self.done = fn, args, kwargs, done
        self.result: Any = None
        self.error: BaseException | None = None

    def outcome(self) -> Any:
        """The call's result, or its exception raised here."""
        if self.error is not None:
            error, self.error = self.error, None  # no reference cycle through the traceback
            raise error
        return self.result


class Hop:
    """Runs calls in at most ``threads`` threads named ``name-N``, in the order submitted."""

    def __init__(self, threads: int, name: str) -> None:
        if threads < 1:
            raise ValueError(f"{name}: at least one thread is needed, not {threads}")
        self._max = threads
        self._name = name
        self._jobs: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self._lock = threading.Lock()  # guards the two counts
        self._started = 0
        # idle threads less the queued jobs no thread has taken yet (negative: jobs wait)
        self._idle = 0

    @property
    def threads(self) -> int:
        """Threads started so far."""
        return self._started

    def submit(self, job: Job) -> None:
        """Queue ``job``; a thread runs it, then calls ``job.done()`` (which must not raise).

        A thread that cannot start (RuntimeError: a pids limit) fails the submit and queues
        nothing, as trio's hop raised into its caller. Before (review18d), the job was queued
        first: its caller got the error (a WRITE answered EIO) while the job stayed queued and
        ran later for the next thread, its bytes landing after the caller had moved on, and
        the thread that never started kept its slot for good (with one slot, every later call
        waited for ever)."""
        with self._lock:
            start = self._idle <= 0 and self._started < self._max
            if start:
                self._started += 1
                number = self._started
            else:
                self._idle -= 1  # an idle thread takes it, or the next one to finish
        if start:
            try:  # the new thread waits for a job: started before this one is queued
                threading.Thread(target=self._serve, name=f"{self._name}-{number}", daemon=True).start()
            except BaseException:
                with self._lock:
                    self._started -= 1
                raise
        self._jobs.put(job)

    def _serve(self) -> None:
        get = self._jobs.get
        while True:
            job = get()
            try:
                job.result = job.fn(*job.args, **job.kwargs)
            except BaseException as exc:  # delivered to the caller, like a pool task's
                job.error = exc
            with self._lock:
                self._idle += 1
            try:
                job.done()
            except BaseException as exc:  # the thread serves on: its slot is not lost
                log.error("%s: a finished call could not wake its caller: %r", self._name, exc)
