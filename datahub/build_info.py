"""Which code this is: the release and the git commit it was built from (``datahub --version``).

Why: a container image or a venv must be able to say which commit's code it runs, so a bug
report or a rollout names it exactly. A source checkout asks git (``-dirty`` when tracked
files differ from the commit). An installed copy without ``.git`` -- a container image --
reads ``COMMIT`` next to this module, which the image build writes from its
``DATAHUB_COMMIT`` build argument (csi/deploy/Dockerfile, csi/deploy/server/Dockerfile).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import datahub

COMMIT_FILE = Path(__file__).with_name("COMMIT")
_CHECKOUT = Path(__file__).resolve().parents[1]


def commit() -> str | None:
    """The commit this code was built from, or None when neither a COMMIT file nor git says."""
    try:
        recorded = COMMIT_FILE.read_text().strip()
    except OSError:
        recorded = ""
    if recorded:
        return recorded
    if not (_CHECKOUT / ".git").exists():  # an installed copy: never ask an unrelated repository
        return None
    try:
        head = _git("rev-parse", "HEAD")
        dirty = _git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("-dirty" if dirty else "")


def version_line() -> str:
    """``datahub 0.1.0 (commit <sha>)``: what ``datahub --version`` prints."""
    return f"datahub {datahub.__version__} (commit {commit() or 'unknown'})"


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(_CHECKOUT), *args], capture_output=True, text=True, check=True, timeout=30
    ).stdout.strip()
