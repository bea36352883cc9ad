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
from collections.abc import Sequence

from datahub.config import load_config
from datahub.errors import DatahubError
from datahub.pack.worker import PackServices, work


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
        try:  # a stop (SIGTERM, Ctrl-C) unwinds ``work``, which hands its task back by its lease
            work(services, args.job, worker=args.name, lease_seconds=args.lease)
        finally:
            services.close()
    except DatahubError as exc:  # the task went back to the queue; say why, without a traceback
        print(f"pack worker {args.name}: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except Stopped as stop:  # the parent says what happened (Ctrl-C reaches the whole group)
        return 128 + stop.signum
    return 0


class Stopped(BaseException):
    """SIGTERM or SIGINT, raised in the main thread so that ``work`` unwinds through its hand-back."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _stop_by_signal(signum: int, _frame: object) -> None:
    """Why not the default (death): only this process knows its task's lease id. The executor's
    own hand-back lists the tasks, and a listing over HTTP never shows a lease id, so with a
    remote catalog a killed worker's task waited for its lease to expire (60 s). Later stop
    signals are ignored so they cannot cut the hand-back short (Ctrl-C, then the executor's
    SIGTERM); the executor kills a worker that has not exited after its grace period."""
    for other in (signal.SIGTERM, signal.SIGINT):
        signal.signal(other, signal.SIG_IGN)
    raise Stopped(signum)


if __name__ == "__main__":
    sys.exit(main())
