"""The ``datahub`` command: the composition root that registers every package's commands.

The library's commands live in this package, one module per subcommand; ``mount``/``umount``
belong to ``fuse_adapter`` and ``labelx`` to ``labelx``. Only this module (and ``datahub.demo``)
may import all of them: see docs/architecture.md, "Layers". The shared runtime (global flags,
error -> exit code) is ``datahub.console.runner``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from datahub.console import runner

# fully qualified command modules; a missing one (a component not installed) is skipped
COMMANDS = (
    "datahub.cli.init_cmd",
    "datahub.cli.serve_cmd",
    "datahub.cli.dataset_cmd",
    "datahub.cli.import_cmd",
    "datahub.cli.commit_cmd",
    "datahub.cli.version_cmd",
    "datahub.cli.token_cmd",
    "datahub.cli.cache_cmd",
    "datahub.cli.migrate_cmd",
    "datahub.cli.lease_cmd",
    "fuse_adapter.mount_cmd",
    "datahub.cli.pack_cmd",
    "labelx.labelx_cmd",
)


def build_parser() -> argparse.ArgumentParser:
    return runner.build_parser(COMMANDS)


def main(argv: Sequence[str] | None = None) -> int:
    return runner.run(COMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
