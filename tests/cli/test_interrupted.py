"""Ctrl-C during a long command: the real ``datahub`` process, a real SIGINT.

The commit reads its change set from a named pipe this test writes to and holds open, so
the command is surely inside its work (it opened the pipe, and waits for more lines) when
the signal comes: no sleep decides it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.cli.conftest import child_env, ended, start_interruptible


def test_ctrl_c_during_a_commit_names_the_dataset_and_what_to_do(tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("datahub")
    env = child_env()

    def datahub(*args: str) -> subprocess.CompletedProcess:
        cmd = [str(exe), "--home", str(tmp_path / "var"), *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)

    (tmp_path / "src" / "cat").mkdir(parents=True)
    (tmp_path / "src" / "cat" / "1.jpg").write_bytes(b"c1")
    assert datahub("import", str(tmp_path / "src"), "--to", "pets").returncode == 0
    changes = tmp_path / "changes.jsonl"
    os.mkfifo(changes)
    cmd = [str(exe), "--home", str(tmp_path / "var"), "commit", "pets", "--changes", str(changes)]
    proc = start_interruptible(cmd, tmp_path)
    try:
        with open(changes, "w") as writer:  # returns once the command has opened the pipe
            writer.write(json.dumps({"op": "delete", "key": "cat/1.jpg"}) + "\n")
            writer.flush()
            proc.send_signal(signal.SIGINT)
            # seen once under a loaded suite: say where it hung
            out, err = ended(proc, 120, "the commit did not stop within 120 s of Ctrl-C")
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "stopped by an error" not in err, err
    last = err.strip().splitlines()[-1]
    assert "datahub commit interrupted (Ctrl-C)" in last and "'pets'" in last, err
    assert "run the same command again" in last, err
    log = json.loads(datahub("--json", "log", "pets").stdout)
    assert [v["seq"] for v in log] == [1]  # nothing half-committed
