"""What newuser34 met running the PyTorch script of a page ``datahub serve --catalog URL`` served.

The script named the server's home (``overrides={'home': H}``) and nothing else, so it opened
the home's ``catalog.db``, not the catalog the server reads and the page showed: run as shown
it failed with "dataset 'pets' not found" (or, with no catalog in the home, made an empty one).
It now names that catalog too; a password in the catalog's URL is not written on the page.
"""

from __future__ import annotations

import html
import re
import subprocess
from pathlib import Path

import httpx

from datahub.browser.pages import torch_script
from tests.cli.test_newuser32_serve import REPO, _env, served
from tests.cli.test_newuser33_serve import SCRIPT, _jpeg


def test_the_pytorch_script_of_serve_catalog_reads_that_catalog(tmp_path: Path) -> None:
    exe = REPO / ".venv" / "bin" / "datahub"
    home = tmp_path / "home"
    catalog = f"sqlite:///{tmp_path / 'team' / 'catalog.db'}"  # not the home's catalog.db
    (tmp_path / "team").mkdir()
    src = tmp_path / "src"
    src.mkdir()
    for i in range(3):
        (src / f"{i}.jpg").write_bytes(_jpeg((80 * i, 90, 90)))
    made = subprocess.run(
        [str(exe), "--home", str(home), "--catalog", catalog, "import", str(src), "--to", "pets"],
        cwd=tmp_path, env=_env(), capture_output=True, text=True,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    with served(exe, home, tmp_path, "--catalog", catalog) as url:
        page = httpx.get(url + "/datasets/pets/versions/1", timeout=30).text
    found = re.search(SCRIPT, page)
    assert found, page
    script = html.unescape(found[1])
    saved_as, run = re.fullmatch(r"# save as (\S+), then run: (.+)", script.splitlines()[0]).groups()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / saved_as).write_text(script)
    ran = subprocess.run(["bash", "-c", run], cwd=elsewhere, env=_env(), capture_output=True, text=True)
    assert ran.returncode == 0 and "Traceback" not in ran.stderr, f"{run}\n{ran.stdout}\n{ran.stderr}"
    assert ran.stdout.strip() == "3 samples of pets@v1 read", ran.stdout
    assert not (home / "catalog.db").exists()  # the script made no empty catalog in the home


def test_a_catalog_password_is_not_written_on_the_page() -> None:
    url = "mongodb://trainer:s3cret@mongo.example:27017/datahub"
    script = torch_script("python", "/srv/var", "pets", 1, "", "", catalog_url=url)
    assert "s3cret" not in script
    assert "'catalog_url': 'mongodb://trainer:****@mongo.example:27017/datahub'" in script, script
    assert "put it in place of ****" in script
    plain = torch_script(
        "python", "/srv/var", "pets", 1, "", "", catalog_url="mongodb://mongo.example/datahub"
    )
    assert "'catalog_url': 'mongodb://mongo.example/datahub'" in plain and "****" not in plain
