"""This installation's programs as a user types them in a shell: what the pages and the
printed commands show for ``python`` (the PyTorch script's interpreter).

Both composition roots show it: ``make run`` (``datahub.demo``) and ``datahub serve``
(``datahub.cli.serve_cmd``), which may not import each other (tests/test_layering.py), so it
lives here, in the command-line runtime both use.
"""

from __future__ import annotations

import sys
from pathlib import Path


def typed_path(exe: Path) -> str:
    """A program of the venv as a user in the current directory types it (``./.venv/bin/...``);
    outside the current directory, its absolute path."""
    try:
        exe = exe.relative_to(Path.cwd())
        return str(exe) if str(exe).startswith(".") else f"./{exe}"
    except ValueError:
        return str(exe)


def python_hint() -> str:
    """The python running datahub, which imports it (``python`` on PATH may not: after ``make
    run`` none is the venv's): the ``python`` beside it when there is one, as shown in ``make
    run``'s lines, else the very interpreter (``python3`` installs have no ``python``)."""
    exe = Path(sys.executable)
    beside = exe.with_name("python")
    return typed_path(beside if beside.exists() else exe)
