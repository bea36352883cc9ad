"""What a test's workspace mount teardown costs: ``datahub umount`` as a process (the old
``FuseEnv.umount``) against its handler in the test's process (tests/fuse/conftest.py now).

    .venv/bin/python -m bench.suite.umount_teardown --rounds 4

Each round, for each way, alternated: a workspace mounted with ``--commit-to``, a 100 KB file
written, then the ``env.mounted`` block's teardown, measured alone: once with the daemon
alive (it flushes and commits on SIGTERM), once after a kill -9 (the teardown recovers the
journal and commits). CPU is this process's and every child's it waited for (the daemon is
reaped by the teardown, so its final flush counts on both sides; the CLI, on the old side).
Needs root and FUSE, as tests/fuse does; a moto server of its own.
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import statistics
import tempfile
import time
from pathlib import Path

from datahub.catalog import open_catalog
from tests.fuse.conftest import FuseEnv, make_env
from tests.servers import MotoServer


def _as_the_command(env: FuseEnv, mountpoint: Path) -> None:
    """The teardown before suiteA27: a ``datahub umount`` process, its exit status unchecked."""
    env.cli("umount", str(mountpoint), check=False)


IN_PROCESS = FuseEnv.umount


def _cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def teardown_cost(env: FuseEnv, name: str, kill: bool) -> tuple[float, float]:
    """CPU-s and wall of one workspace mount's teardown."""
    mnt = env.mountpoint(name)
    with env.mounted(mnt, "--workspace", name, "--commit-to", f"ds-{name}") as proc:
        (mnt / "f.bin").write_bytes(os.urandom(100_000))
        if kill:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        cpu, wall = _cpu(), time.monotonic()
    return _cpu() - cpu, time.monotonic() - wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4, help="rounds of each way (default 4)")
    args = parser.parse_args()
    server = MotoServer()
    try:
        env = make_env(Path(tempfile.mkdtemp(prefix="umount-teardown-")), server.endpoint)
        open_catalog(env.config.resolved_catalog_url).close()  # --commit-to needs a catalog
        env.cli("umount", "/nonexistent", check=False)  # the CLI's bytecode written before round 1
        results: dict[tuple[str, bool], list[tuple[float, float]]] = {}
        for i in range(args.rounds):
            for way, umount in (("command", _as_the_command), ("in-process", IN_PROCESS)):
                FuseEnv.umount = umount
                for kill in (False, True):
                    cost = teardown_cost(env, f"{way[:2]}{i}{'k' if kill else ''}", kill)
                    results.setdefault((way, kill), []).append(cost)
                    print(f"{way} {'kill -9' if kill else 'stopped'}: {cost[0]:.2f} CPU-s {cost[1]:.2f} s "
                          f"load {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
        FuseEnv.umount = IN_PROCESS
        for (way, kill), costs in sorted(results.items()):
            print(
                f"{way:10} {'kill -9' if kill else 'stopped':7}: median {statistics.median(c[0] for c in costs):.2f} "
                f"CPU-s, {statistics.median(c[1] for c in costs):.2f} s wall ({len(costs)} rounds)"
            )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
