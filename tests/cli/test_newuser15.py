"""What a new user met on the command line (newuser15), through the real ``datahub`` command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests import zygote
from tests.ingest.conftest import write_tree

REPO = Path(__file__).resolve().parents[2]
FILES = {"train/cat/1.jpg": b"c1", "train/dog/2.jpg": b"d2", "val/cat/3.jpg": b"c3", "README": b"r"}


def datahub(home: Path, *args: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "datahub.cli.main", "--home", str(home), *args]
    return zygote.run(argv, timeout=120, cwd=REPO)  # a fork of a pre-imported interpreter


def test_ls_that_lists_nothing_says_why_on_stderr(tmp_path: Path) -> None:
    """A typo in a prefix or in a filter's field printed nothing and exited 0, exactly as a
    version without such records does: the user could not tell a typo from an empty folder."""
    home = tmp_path / "var"
    src = write_tree(tmp_path / "src", FILES)
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(
        "".join(
            f'{{"url": "{(src / k).as_uri()}", "key": "{k}", "labels": {{"class": "{k.split("/")[1]}"}}}}\n'
            for k in FILES
            if "/" in k
        )  # fmt: skip
    )
    assert datahub(home, "import", str(manifest), "--to", "pets").returncode == 0

    cases = {
        (
            "--prefix",
            "trian/",
        ): "no record of pets@latest under prefix 'trian/'; the top level holds: train/, val/",
        (
            "--prefix",
            "train/cta/",
        ): "no record of pets@latest under prefix 'train/cta/'; 'train/' holds: cat/, dog/",
        ("--filter", "labels.clas=cat"): (
            "no record of pets@latest matches 'labels.clas=cat'; its first record (train/cat/1.jpg) has the fields labels.class"
        ),
        ("--prefix", "val/", "--filter", "labels.class=dog"): (
            "no record of pets@latest under prefix 'val/' matches 'labels.class=dog'; its first record (val/cat/3.jpg) "
            "has the fields labels.class"
        ),
    }
    for args, said in cases.items():
        proc = datahub(home, "ls", "pets", *args)
        assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", said + "\n"), args
    # output for scripts is unchanged: --json says nothing, and a listing that found records neither
    proc = datahub(home, "--json", "ls", "pets", "--prefix", "trian/")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    proc = datahub(home, "ls", "pets", "--prefix", "val/")
    assert proc.returncode == 0 and proc.stdout.startswith("val/cat/3.jpg") and proc.stderr == ""
