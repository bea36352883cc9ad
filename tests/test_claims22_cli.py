"""docs/cli.md's promise for a home with no catalog, on the commands it was false for (claims22).

"Only the commands that create (...) create a catalog where there is none; every other command
exits 3 with `no catalog at <home>/catalog.db` ... and leaves nothing behind (no `./var`, no
tree under a mistyped `--home`)." Before claims22 `pack-worker` made a new empty catalog, a
whole disk cache and a scratch directory under a mistyped `--home`, and then said the job was
not found (a worker pointed at the wrong home waited on a catalog of its own); the LabelX
commands that read accounts (`labelx projects`, `disable-user`, `set-password`) made
`<home>/labelx.db` before they found there was no catalog.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests import zygote

COMMANDS = [
    ("pack-worker", "--job", "pack-0123"),
    ("labelx", "projects"),
    ("labelx", "disable-user", "bob"),
    ("labelx", "set-password", "bob"),
    ("dataset", "list"),  # one that kept the promise already: the same check, as a reference
]


def datahub(argv: list[str], *, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``datahub ARGV``: the console script's ``main`` (``python -m datahub.cli.main``) in a fork of
    the worker's pre-imported interpreter (tests/zygote.py), as tests/cli runs it; the promise is
    the command's, not the console script's (tests/test_docs_commands.py runs that). This
    process's ``PYTHON*`` variables are kept so that the zygote fits."""
    python = {k: v for k, v in os.environ.items() if k.startswith("PYTHON") and k != "PYTHONPATH"}
    cmd = [sys.executable, "-m", "datahub.cli.main", *argv]
    return zygote.run(cmd, timeout=120, env={**python, **env}, cwd=cwd)


@pytest.mark.parametrize("argv", COMMANDS, ids=[" ".join(a[:2]) for a in COMMANDS])
def test_a_command_on_a_mistyped_home_exits_3_and_makes_nothing(
    argv: tuple[str, ...], tmp_path: Path
) -> None:
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "LABELX_PASSWORD": "a-long-password",
    }
    done = datahub(["--home", "hoem", *argv], cwd=tmp_path, env=env)
    assert done.returncode == 3, done.stderr
    assert f"no catalog at {tmp_path / 'hoem' / 'catalog.db'}" in done.stderr, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "left behind under the mistyped home"


def test_the_creating_commands_still_create(tmp_path: Path) -> None:
    """The other side of the rule: `labelx create-user` on a new home makes the catalog and
    the account (the first step docs/labelx.md shows)."""
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "LABELX_PASSWORD": "a-long-password",
    }

    def run(*argv: str) -> subprocess.CompletedProcess:
        return datahub(["--home", "home", *argv], cwd=tmp_path, env=env)

    made = run("labelx", "create-user", "bob", "--role", "annotator")
    assert made.returncode == 0, made.stderr
    assert (tmp_path / "home" / "catalog.db").is_file()
    with ThreadPoolExecutor(2) as pool:
        disabled, projects = pool.map(
            lambda a: run(*a), [("labelx", "disable-user", "bob"), ("labelx", "projects")]
        )
    assert disabled.returncode == 0 and projects.returncode == 0, (disabled.stderr, projects.stderr)
