"""What newuser33 met running the PyTorch script of a page ``.venv/bin/datahub --home H serve`` served.

``make run``'s pages write the script for its venv's python and its home; ``datahub serve``'s
said ``# … then run: python train.py`` over ``load_config()``: no datahub to import where the
venv is not on PATH, and, run as shown from another directory, the reader's default home
(./var there), not the catalog the page showed. ``serve`` now writes it as ``make run`` does
(the shared part, ``datahub.console.programs``, is a module both may import).
"""

from __future__ import annotations

import html
import io
import re
import shlex
import subprocess
from pathlib import Path

import httpx
from PIL import Image

from tests.cli.test_newuser32_serve import REPO, _env, served

SCRIPT = r'<span class="snippet-label" id="snippet-3">PyTorch</span>\s*<pre[^>]*id="snippet-text-3"[^>]*>([^<]*)</pre>'


def _jpeg(color: tuple[int, int, int]) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (32, 24), color).save(out, "JPEG")
    return out.getvalue()


def test_the_pytorch_script_of_serve_runs_as_shown_on_its_home(tmp_path: Path) -> None:
    exe = REPO / ".venv" / "bin" / "datahub"
    home = tmp_path / "my home"
    src = tmp_path / "src"
    src.mkdir()
    for i in range(3):
        (src / f"{i}.jpg").write_bytes(_jpeg((80 * i, 90, 90)))
    made = subprocess.run(
        [str(exe), "--home", str(home), "import", str(src), "--to", "pets"],
        cwd=tmp_path, env=_env(), capture_output=True, text=True,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    with served(exe, home, tmp_path) as url:
        page = httpx.get(url + "/datasets/pets/versions/1", timeout=30).text
    found = re.search(SCRIPT, page)
    assert found, page
    script = html.unescape(found[1])
    saved_as, run = re.fullmatch(r"# save as (\S+), then run: (.+)", script.splitlines()[0]).groups()
    assert f"overrides={{'home': {str(home)!r}}}" in script, script
    elsewhere = tmp_path / "elsewhere"  # not where serve ran, and no home there
    elsewhere.mkdir()
    (elsewhere / saved_as).write_text(script)
    ran = subprocess.run(["bash", "-c", run], cwd=elsewhere, env=_env(), capture_output=True, text=True)
    assert ran.returncode == 0 and "Traceback" not in ran.stderr, f"{run}\n{ran.stdout}\n{ran.stderr}"
    assert ran.stdout.strip() == "3 samples of pets@v1 read", ran.stdout
    assert not (elsewhere / "var").exists()
    assert shlex.split(run)[0] != "python"  # the python that runs datahub, not PATH's
