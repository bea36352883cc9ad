"""docs/labelx.md's "Run it" block, as written, on a new home: three accounts, then the server
(its port moved to a free one), which answers its login page and stops on SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.servers import free_port

REPO = Path(__file__).resolve().parents[2]


def test_the_run_it_block_runs_as_written(tmp_path: Path) -> None:
    section = (REPO / "docs" / "labelx.md").read_text().split("## Run it", 1)[1]
    lines = re.search(r"```sh\n(.*?)```", section, re.S).group(1).strip().splitlines()
    *accounts, serve = lines
    assert serve.startswith("datahub labelx serve --port 8090"), serve
    env = {k: v for k, v in os.environ.items() if not k.startswith("DATAHUB_")}
    env |= {"PATH": f"{Path(sys.executable).parent}:{env['PATH']}", "LABELX_PASSWORD": "correct-horse-9"}
    made = subprocess.run(
        ["bash", "-eu", "-c", "\n".join(accounts)], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert made.returncode == 0, made.stderr
    assert re.findall(r"^role\s+(\w+)$", made.stdout, re.M) == ["admin", "annotator", "reviewer"]
    port = free_port()
    proc = subprocess.Popen(
        ["bash", "-c", f"exec {serve.replace('8090', str(port))}"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120  # a hang guard, never a timing goal
        while True:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "labelx serve did not answer"
            try:
                page = httpx.get(f"http://127.0.0.1:{port}/login", timeout=2)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        assert page.status_code == 200 and "LabelX" in page.text
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert f"LabelX on http://127.0.0.1:{port}/" in out + err
