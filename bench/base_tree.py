"""A base commit's tree beside this one, for a benchmark's same-run A/B.

Why one function: every A/B bench extracts ``git archive COMMIT`` and must copy what
``make install`` builds and git does not hold (the catalog's ``_put_rows`` extension), or
the base silently runs its slower pure-Python fallback and the comparison flatters the head."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def extract(commit: str, into: Path, *paths: str) -> Path:
    """``git archive COMMIT [PATHS]`` of this repository unpacked in ``into`` (made), with this
    tree's built ``_put_rows`` extension copied in when ``datahub`` is extracted."""
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit, *paths], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    if (into / "datahub" / "catalog").is_dir():
        for built in (ROOT / "datahub" / "catalog").glob("_put_rows*.so"):
            shutil.copy(built, into / "datahub" / "catalog")
    return into
