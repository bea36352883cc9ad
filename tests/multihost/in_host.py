"""``python -m tests.multihost.in_host NETNS MODULE ARGS``: ``python -m MODULE ARGS`` on a test host.

Why: the nodes' ``datahub`` commands and mount daemons ran as ``nsenter --net=... python ...``,
a fresh interpreter each (~0.5 CPU-s of imports: the CLI, pydantic, botocore, trio, pyfuse3),
dozens per run of tests/multihost. Started as this module, they are forks of the worker's
pre-imported zygote (tests/zygote.py) that join the host's network namespace before they run
MODULE: what ``nsenter --net`` does (setns(2) of the network namespace only: the root mount
namespace is kept, so a mount made here is the test's to read), without the exec. The fork
has no other thread yet, so every thread MODULE starts is in the host's namespace too. Run
as a fresh interpreter (``DATAHUB_TEST_ZYGOTE=0``) it does the same.
"""

from __future__ import annotations

import ctypes
import os
import runpy
import sys

CLONE_NEWNET = 0x40000000


def join_netns(name: str) -> None:
    """Move this (single-threaded) process into the network namespace ``ip netns`` calls ``name``."""
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns to network namespace {name}: {os.strerror(err)}")
    finally:
        os.close(fd)


def main() -> None:
    if len(sys.argv) < 3:
        raise SystemExit("usage: python -m tests.multihost.in_host NETNS (MODULE | -c CODE) [ARGS...]")
    netns, module, *args = sys.argv[1:]
    join_netns(netns)
    if module == "-c":  # ``python -c CODE ARGS``: a script (e.g. a boto3 client's calls)
        sys.argv = ["-c", *args[1:]]
        exec(compile(args[0], "<string>", "exec"), {"__name__": "__main__"})
        return
    sys.argv = [module, *args]  # runpy puts MODULE's file name first, as ``python -m`` does
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
