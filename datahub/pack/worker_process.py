"""Entry point of one local worker process: ``python -m datahub.pack.worker_process``.

The local executor starts workers as fresh interpreters running this small module
(not through ``multiprocessing``), so a child never re-imports the caller's ``__main__``
(a training script importing torch would cost every worker seconds) and runs exactly the
loop a remote ``datahub pack-worker`` runs. The parent's Config arrives as JSON on stdin,
so secrets in it never touch the disk or the command line.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from datahub.config import load_config
from datahub.console.context import shown
from datahub.errors import DatahubError, LeaseLost
from datahub.pack.worker import PackServices, work
from datahub.tasks import Task, TaskQueue


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m datahub.pack.worker_process")
    parser.add_argument("--job", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--lease", type=float, default=60.0)
    args = parser.parse_args(argv)
    config = load_config(env={}, overrides=json.load(sys.stdin))
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _stop_by_signal)
    try:
        services = PackServices.open(config)
        queue = services.queue = _HandBack(services.queue)
        try:  # a stop (SIGTERM, Ctrl-C) unwinds ``work``, which hands its task back by its lease
            work(services, args.job, worker=args.name, lease_seconds=args.lease)
        except Stopped:  # whatever moment it hit: the task still held goes back too
            queue.hand_back()
            raise
        finally:
            services.close()
    except DatahubError as exc:  # the task went back to the queue; say why, without a traceback
        print(f"pack worker {shown(args.name)}: {shown(exc.message)}", file=sys.stderr)
        return exc.exit_code
    except Stopped as stop:  # the parent says what happened (Ctrl-C reaches the whole group)
        return 128 + stop.signum
    return 0


class Stopped(BaseException):
    """SIGTERM or SIGINT, raised in the main thread so that ``work`` unwinds through its hand-back."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class _HandBack:
    """``services.queue`` as ``work`` sees it: it knows the task this worker holds, and a stop
    signal that lands during a claim, completion, failure or release of the main thread is
    raised as soon as that call has returned, its answer kept.

    Why: ``work`` hands its task back only from inside its packing. A signal that hit as the
    claim was returning (the task DOING under a new lease, not yet in ``work``'s hands) or
    between the packing and the completion left the task leased to a stopped worker until
    the lease expired (60 s), the wait the hand-back exists to remove (review13)."""

    def __init__(self, queue: TaskQueue) -> None:
        self._queue = queue
        self.held: Task | None = None  # claimed, not yet completed, failed or released

    def __getattr__(self, name: str) -> Any:  # get_job, tasks, renew (the lease thread): as is
        return getattr(self._queue, name)

    def claim(self, *args: Any, **kwargs: Any) -> Task | None:
        with _deferred():
            task = self.held = self._queue.claim(*args, **kwargs)
        return task

    def complete(self, *args: Any, **kwargs: Any) -> Task:
        return self._settle(self._queue.complete, args, kwargs)

    def fail(self, *args: Any, **kwargs: Any) -> Task:
        return self._settle(self._queue.fail, args, kwargs)

    def release(self, *args: Any, **kwargs: Any) -> None:
        return self._settle(self._queue.release, args, kwargs)

    def _settle(self, call: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        """A call that ends this worker's hold on its task (also when the lease was lost)."""
        with _deferred():
            try:
                answer = call(*args, **kwargs)
            except LeaseLost:
                self.held = None
                raise
            self.held = None
        return answer

    def hand_back(self) -> None:
        """Release the task still held, by its lease; a failure is reported, never raised
        (the lease then expires as before)."""
        task, self.held = self.held, None
        if task is None:
            return
        try:
            self._queue.release(task.job, task.index, task.lease)
        except DatahubError as exc:
            print(
                f"pack worker: could not hand task {task.index} back: {shown(exc.message)}", file=sys.stderr
            )


# the main thread's queue call that a stop signal waits for: [running, signal number or 0]
_deferring = [False, 0]


@contextmanager
def _deferred() -> Iterator[None]:
    """In the main thread (where signal handlers run): a stop signal arriving meanwhile is
    raised when this ends. Other threads (none calls these today) are not deferred."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _deferring[:] = [True, 0]
    try:
        yield
    finally:
        _deferring[0] = False  # first: a signal from now on is raised by the handler itself,
        signum = _deferring[1]  # one before was recorded here (read after, so never lost)
        if signum:
            raise Stopped(signum)


def _stop_by_signal(signum: int, _frame: object) -> None:
    """Why not the default (death): only this process knows its task's lease id. The executor's
    own hand-back lists the tasks, and a listing over HTTP never shows a lease id, so with a
    remote catalog a killed worker's task waited for its lease to expire (60 s). Later stop
    signals are ignored so they cannot cut the hand-back short (Ctrl-C, then the executor's
    SIGTERM); the executor kills a worker that has not exited after its grace period."""
    for other in (signal.SIGTERM, signal.SIGINT):
        signal.signal(other, signal.SIG_IGN)
    if _deferring[0]:  # a queue call is running: raised once it has returned (``_HandBack``)
        _deferring[1] = signum
        return
    raise Stopped(signum)


if __name__ == "__main__":
    sys.exit(main())
