"""newuser28: a node plugin started with a ``--kubelet-dir`` that is no directory refuses to start.

It started quietly and served; every NodePublishVolume and NodeStageVolume was then refused as
"outside the kubelet's directory", the first sign of the typo. The kubelet makes its root dir
before it runs any pod, so a DaemonSet's plugin always finds it; the tests' plugins pass their
session's base temp dir (tests/csi/conftest.py), which exists.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _start(tmp_path: Path, kubelet_dir: Path) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "csi", "--mode", "node", "--endpoint", f"unix://{tmp_path / 'csi.sock'}"]
    argv += ["--state-dir", str(tmp_path / "state"), "--kubelet-dir", str(kubelet_dir)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("DATAHUB_")}
    env["DATAHUB_HOME"] = str(tmp_path / "home")
    proc = subprocess.Popen(
        argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.terminate()
        out, err = proc.communicate(timeout=30)
        pytest.fail(f"the plugin started and served with --kubelet-dir {kubelet_dir}: {err[-1500:]}")
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_a_kubelet_dir_that_is_no_directory_stops_the_node_plugin_naming_flag_and_path(
    tmp_path: Path, kind: str
) -> None:
    kubelet_dir = tmp_path / "var-lib-kubelet"
    if kind == "file":
        kubelet_dir.write_text("")
    run = _start(tmp_path, kubelet_dir)
    assert run.returncode == 2, run.stderr
    (line,) = [x for x in run.stderr.splitlines() if "error:" in x]
    want = "no such directory" if kind == "missing" else "not a directory"
    assert f"argument --kubelet-dir: {kubelet_dir}: {want}; give the kubelet's --root-dir" in line, line
    assert not (tmp_path / "csi.sock").exists() and not (tmp_path / "state").exists()


def test_the_controller_alone_needs_no_kubelet_dir(tmp_path: Path) -> None:
    """The controller Deployment mounts nothing and runs on no kubelet's dir: it starts."""
    sock = tmp_path / "csi.sock"
    argv = [sys.executable, "-m", "csi", "--mode", "controller", "--endpoint", f"unix://{sock}"]
    argv += ["--kubelet-dir", str(tmp_path / "no-kubelet-here")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("DATAHUB_")}
    env["DATAHUB_HOME"] = str(tmp_path / "home")
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        said: list[str] = []
        for line in proc.stderr:  # ends only if the plugin exits
            said.append(line)
            if "serving CSI" in line:
                break
        assert "serving CSI" in said[-1] and sock.exists(), "".join(said)[-1500:]
    finally:
        proc.terminate()
        proc.wait(timeout=60)
