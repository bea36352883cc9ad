"""The file a command writes (``-o FILE``), checked before any work is done.

Why: ``datahub export sample -o /no/such/dir/x.ndjson`` and ``datahub labelx export … -o`` into
a missing directory ended in "this is a datahub bug" (a ``FileNotFoundError`` from the temporary
file), and ``-o /`` read the whole version before it failed renaming over the directory
(newuser17). A wrong path is the user's to fix: it is said in words, exit 2, at once.
"""

from __future__ import annotations

import os
from pathlib import Path

from datahub.errors import InvalidInput


def output_file(path: str) -> Path:
    """``path`` as a file this user can create or replace; InvalidInput naming what is wrong
    with it (a directory, a missing or unwritable directory) and what to do otherwise."""
    target = Path(path)
    parent = target.parent
    if target.is_dir():
        raise InvalidInput(f"-o {path}: that is a directory; name a file in it (-o {target / 'NAME'})")
    if parent.exists() and not parent.is_dir():
        raise InvalidInput(f"-o {path}: {parent} is a file, not a directory; write elsewhere")
    if not parent.is_dir():
        raise InvalidInput(
            f"-o {path}: directory {parent} does not exist; create it first or write elsewhere"
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InvalidInput(f"-o {path}: this user may not create files in {parent}; write elsewhere")
    return target
