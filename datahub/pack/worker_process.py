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
    try:
        services = PackServices.open(config)
        try:  # SIGTERM ends the process; the executor then hands this worker's task back
            work(services, args.job, worker=args.name, lease_seconds=args.lease)
        finally:
            services.close()
    except DatahubError as exc:  # the task went back to the queue; say why, without a traceback
        print(f"pack worker {args.name}: {exc.message}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
