"""``moto_server`` for the tests, with its per-request scan of moto's package directory done once.

Why: moto's server finds the backend of each request from its host. A path-style request
to ``127.0.0.1:PORT`` (every S3 client here) matches no backend URL, so moto infers the
host ``s3.us-east-1.amazonaws.com`` from the request and then asks whether that host is a
module of moto: ``moto.backends.list_of_moto_modules()`` lists moto's package directory and
stats each of its ~180 entries, on every request. That was half of the server's CPU per
request (moto 5.2.5, in-process WSGI client: 4.6–5.1 CPU-ms per PUT and 4.2–4.4 per GET,
2.0–2.4 and 1.4–1.9 with the list read once; docs/benchmarks.md, "Suite time, round 5"),
on the two cores the suite's workers share with it. moto's package directory does not change
while the server runs, so the list is read once; every request is still routed, answered and
logged by moto's own server, exactly as by ``moto_server``.

Usage (the arguments of ``moto_server``): ``python tests/moto_launch.py -H 127.0.0.1 -p 5000``
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

# the command line that starts it (tests/servers.py, tests/multihost/cluster.py, tests/csi);
# -P: the script's folder (tests/, whose packages are named torch, api, cache, ...) is not put
# on sys.path ahead of the modules moto imports
MOTO_SERVER = [sys.executable, "-P", str(Path(__file__).resolve())]


def read_module_list_once() -> None:
    """Make ``list_of_moto_modules`` answer from one listing of moto's package directory."""
    from moto import backends

    modules = tuple(backends.list_of_moto_modules())
    backends.list_of_moto_modules = lambda: modules


def exit_with_parent(poll: float = 0.25) -> None:
    """End this server when the process that started it is gone (reparented), within ``poll`` s.

    Why: a suite stopped by Ctrl-C or a killed xdist worker never ran the fixture's teardown,
    and its moto servers lived on, two of them at 100 % CPU and deaf to SIGTERM (suiteB26);
    the next run on the machine shared its cores with them. Not PR_SET_PDEATHSIG: that fires
    when the *thread* that forked exits, and a fixture may start a server from any thread.
    """
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll)
        os._exit(0)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def main(argv: list[str] | None = None) -> None:
    exit_with_parent()
    read_module_list_once()
    from moto.server import main as moto_server

    moto_server(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
