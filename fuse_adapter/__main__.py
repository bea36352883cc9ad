"""``python -m fuse_adapter mount|umount ...``: the ``datahub`` CLI with only the mount commands.

Same flags, config, error handling and exit codes as ``datahub mount`` (the same runtime,
``datahub.console.runner``), but the parser registers only ``fuse_adapter.mount_cmd``: a
mount daemon (and each background re-exec) starts without importing every other
subcommand's libraries, and a broken unrelated subcommand cannot stop a training pod from
mounting its data.
"""

from __future__ import annotations

import sys

from datahub.console import runner

COMMANDS = ("fuse_adapter.mount_cmd",)


def main() -> int:
    return runner.run(COMMANDS)


if __name__ == "__main__":
    sys.exit(main())
