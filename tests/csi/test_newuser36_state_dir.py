"""newuser36: a node plugin whose ``--state-dir`` it cannot make or write refuses to start.

``python -m csi --state-dir /proc/x`` (or a read-only host path) ended in Python's traceback
of ``FileNotFoundError`` from ``mkdir``; a file given there would have failed at the first
publish. Now exit 2 with one line naming the flag, the path, why and what to give.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.csi.test_newuser28 import REPO


@pytest.mark.parametrize("kind", ["proc", "file"])
def test_a_state_dir_it_cannot_write_stops_the_node_plugin_naming_flag_and_path(
    tmp_path: Path, kind: str
) -> None:
    state = Path("/proc/datahub-csi-state") if kind == "proc" else tmp_path / "a-file"
    if kind == "file":
        state.write_text("")
    argv = [sys.executable, "-m", "csi", "--mode", "node", "--endpoint", f"unix://{tmp_path / 'csi.sock'}"]
    argv += ["--state-dir", str(state), "--kubelet-dir", str(tmp_path)]
    run = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    (line,) = [x for x in run.stderr.splitlines() if "error:" in x]
    why = "cannot be made or written (" if kind == "proc" else "not a directory"
    assert f"argument --state-dir: {state}: {why}" in line, line
    assert "give a directory this user may write" in line, line
    assert not (tmp_path / "csi.sock").exists()
