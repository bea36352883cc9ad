"""``python -m fuse_adapter mount|umount ...``: the ``datahub`` CLI with only the mount commands.

Same flags, config, error handling and exit codes as ``datahub mount`` (it *is*
``datahub.cli.main``), but the parser registers only ``mount_cmd``: a mount daemon (and
each background re-exec) starts without importing every other subcommand's libraries,
and a broken unrelated subcommand cannot stop a training pod from mounting its data.
"""

from __future__ import annotations

import sys

from datahub.cli import main as cli


def main() -> int:
    cli.COMMANDS = ("mount_cmd",)
    return cli.main()


if __name__ == "__main__":
    sys.exit(main())
