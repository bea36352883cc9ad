"""``python -m fuse_adapter mount|umount ...``: the ``datahub`` CLI with only the mount commands.

Same flags, config, error handling and exit codes as ``datahub mount`` (the same runtime,
``datahub.console.runner``), but the parser registers only ``fuse_adapter.mount_cmd``: a
mount daemon (and each background re-exec) starts without importing every other
subcommand's libraries, and a broken unrelated subcommand cannot stop a training pod from
mounting its data.
"""

from __future__ import annotations

import atexit
import os
import sys
from typing import NoReturn

from datahub.console import runner

COMMANDS = ("fuse_adapter.mount_cmd",)


def main() -> int:
    return runner.run(COMMANDS)


def exit_now(code: int) -> NoReturn:
    """End the process once ``main`` has returned, without the interpreter's finalization.

    Why: a stopping mount daemon spent 0.7-1.4 s of wall after its last atexit handler, tearing
    down its modules and objects (docs/benchmarks.md, unpublish15), and ``datahub umount`` (a
    CSI unpublish) waits for its exit. Nothing durable is left to that teardown: the command
    has closed its mount, workspace (journal marked clean, lease released), catalog and stores
    before ``main`` returns. The atexit handlers still run (logging's flush, multiprocessing's
    children, ``weakref.finalize``), then the standard streams are flushed.
    """
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more to say there
            pass
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
