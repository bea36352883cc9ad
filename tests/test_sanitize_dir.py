"""``make sanitize`` builds its ASan pyfuse3 inside the checkout that runs it (c29).

Why: the build went to ``.venv/opt/pyfuse3-sanitize``. A worktree whose ``.venv`` is a
symbolic link to another checkout's venv (how engineers share one venv: the lead's README)
then built its tree into the shared venv, over the build another worktree's run was importing
at that moment: that run's mount daemons loaded the other tree's C, and its verdict was about
code it never had. Now the build goes to ``var/pyfuse3-sanitize`` of the checkout (git-ignored,
beside the run's reports in ``var/sanitize/``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STUB = """#!/usr/bin/env bash
# the build, stubbed: where scripts/sanitize.sh asked for it, then a failure that ends the run
echo "$PYFUSE3_SANITIZE" > "$(dirname "$0")/../built_into"
exit 3
"""


def test_the_sanitized_build_goes_into_the_checkout_not_a_shared_venv(tmp_path: Path) -> None:
    shared = tmp_path / "lead" / ".venv"
    (shared / "opt").mkdir(parents=True)
    checkout = tmp_path / "worktree"
    (checkout / "scripts").mkdir(parents=True)
    (checkout / ".venv").symlink_to(shared)
    shutil.copy2(REPO / "scripts" / "sanitize.sh", checkout / "scripts" / "sanitize.sh")
    stub = checkout / "scripts" / "build_pyfuse3.sh"
    stub.write_text(STUB)
    stub.chmod(0o755)
    env = {**os.environ, "PYTHON": sys.executable}
    run = subprocess.run(
        ["bash", str(checkout / "scripts" / "sanitize.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 3, run.stderr  # the stub's failure: nothing past the build ran
    built = Path((checkout / "built_into").read_text().strip())
    assert built.resolve().is_relative_to(checkout.resolve()), built
    assert not built.resolve().is_relative_to(shared.resolve()), built
    assert list((shared / "opt").iterdir()) == []
