"""``make run``'s demo given ``--config FILE`` (docs/quickstart.md names the option): the
commands it prints name that file (newuser24).

Before, they named only ``--home``: with a file whose ``catalog_url`` is not the home's
``catalog.db`` every printed line failed ("no catalog at var/catalog.db"), and the dataset
browser's PyTorch script read another catalog than the demo's.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from datahub.browser.pages import torch_script

REPO = Path(__file__).resolve().parents[2]
SHELL_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def test_the_lines_a_demo_with_a_config_file_prints_run_as_shown(tmp_path: Path) -> None:
    (tmp_path / ".venv").symlink_to(REPO / ".venv")
    (tmp_path / "conf").mkdir()
    team = tmp_path / "conf" / "team.toml"
    team.write_text(f'catalog_url = "sqlite:///{tmp_path / "conf" / "team.db"}"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATAHUB_", "VIRTUAL_ENV"))}
    env.update(PATH=SHELL_PATH, PYTHONPATH=str(REPO))
    demo = subprocess.run(
        [".venv/bin/python", "-m", "datahub.demo", "--config", "conf/team.toml", "--no-wait",
         "--skip", "listen", "--skip", "mount", "--skip", "serve"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert demo.returncode == 0, demo.stderr
    tried = demo.stdout.split("Try:\n", 1)[1].split("\n\n", 1)[0]
    commands = [line.strip() for line in tried.splitlines()]
    assert commands and all(c.startswith(f".venv/bin/datahub --config {team} --home ") for c in commands), (
        tried
    )
    script = "\n".join(commands).replace("> /tmp/", f"> {tmp_path}/")
    proc = subprocess.run(
        ["bash", "-eu", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, f"{script}\n{proc.stdout}\n{proc.stderr}"
    assert (tmp_path / "sample.ndjson").read_text().count("\n") == 300


def test_the_pytorch_script_opens_the_demos_config_file() -> None:
    script = torch_script(".venv/bin/python", "/srv/var", "sample", 1, "", "", config_file="/srv/team.toml")
    assert "config = load_config('/srv/team.toml', overrides={'home': '/srv/var'})" in script
    compile(script, "train.py", "exec")
    plain = torch_script("python", None, "sample", 1, "", "")
    assert "config = load_config()" in plain
