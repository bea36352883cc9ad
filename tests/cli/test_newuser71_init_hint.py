"""What newuser71 met with ``--catalog sqlite:///FILE`` naming a catalog that is not there:
the error said to create one with ``datahub --home HOME init``, which creates HOME/catalog.db,
not FILE; typed as shown it "worked", and the refused command was refused again with the same
message (and a home with a space was named unquoted, split in two as typed). The command it
names now creates the catalog the refused command reads, quoted for the shell."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

from tests.cli.test_newuser25_cli import REPO, SHELL_PATH


def test_the_init_a_missing_catalog_error_names_creates_that_catalog(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATAHUB_", "VIRTUAL_ENV"))}
    env.update(PATH=SHELL_PATH, PYTHONPATH=str(REPO))
    datahub = str(REPO / ".venv" / "bin" / "datahub")
    home = tmp_path / "home"
    catalog = tmp_path / "team catalogs" / "main.db"
    catalog.parent.mkdir()

    def run(argv: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)

    listing = [datahub, "--home", str(home), "--catalog", f"sqlite:///{catalog}", "dataset", "list"]
    refused = run(listing)
    assert refused.returncode == 3, refused.stderr
    assert f"no catalog at {catalog}" in refused.stderr, refused.stderr
    shown = re.search(r"create one there with `([^`]+)`", refused.stderr)
    assert shown is not None, refused.stderr
    made = run(shlex.split(shown[1]))  # typed as shown
    assert made.returncode == 0, made.stderr
    assert catalog.is_file(), f"{shown[1]!r} did not create {catalog}: {made.stdout}"
    listed = run(listing)
    assert listed.returncode == 0, listed.stderr


def test_the_init_for_the_homes_own_catalog_names_the_home_alone(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATAHUB_", "VIRTUAL_ENV"))}
    env.update(PATH=SHELL_PATH, PYTHONPATH=str(REPO))
    home = tmp_path / "a home"
    refused = subprocess.run(
        [str(REPO / ".venv" / "bin" / "datahub"), "--home", str(home), "log", "pets"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert refused.returncode == 3, refused.stderr
    shown = re.search(r"create one there with `([^`]+)`", refused.stderr)
    assert shown is not None and shlex.split(shown[1])[1:] == ["--home", str(home), "init"], refused.stderr


def test_the_init_fsspec_names_for_a_missing_catalog_url_creates_that_catalog(tmp_path: Path) -> None:
    """The same for ``fsspec.filesystem("datahub", catalog_url=...)`` (docs/cache.md)."""
    import fsspec

    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATAHUB_", "VIRTUAL_ENV"))}
    env.update(PATH=SHELL_PATH, PYTHONPATH=str(REPO))
    home, catalog = tmp_path / "home", tmp_path / "other.db"

    def listing() -> list:
        fs = fsspec.filesystem(
            "datahub", home=str(home), catalog_url=f"sqlite:///{catalog}", skip_instance_cache=True
        )
        return fs.ls("")

    try:
        listing()
    except FileNotFoundError as exc:
        said = str(exc)
    else:
        raise AssertionError("a missing catalog listed")
    shown = re.search(r"create one there with `([^`]+)`", said)
    assert shown is not None, said
    argv = shlex.split(shown[1])
    assert argv[0] == "datahub", argv
    made = subprocess.run(
        [str(REPO / ".venv" / "bin" / "datahub"), *argv[1:]],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert catalog.is_file(), f"{shown[1]!r} did not create {catalog}"
    assert listing() == []
