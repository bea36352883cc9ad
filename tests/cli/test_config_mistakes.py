"""The commonest configuration mistakes a new user makes, through the installed ``datahub``:
a ``--config`` path that does not exist, a file that is not TOML, a setting of the wrong type
(in the file or in a ``DATAHUB_*`` variable). Each is one line naming what and where, exit 2,
never a traceback (they were raised before the command's error handling, as a traceback)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import zygote

REPO = Path(__file__).resolve().parents[2]


def datahub(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("DATAHUB_")}
    environ.update({"PYTHONPATH": str(REPO), **(env or {})})
    # the console script's ``main`` in a fork of a pre-imported interpreter (tests/zygote.py);
    # tests/cli/test_cli.py starts the console script itself
    command = [sys.executable, "-m", "datahub.cli.main", "--home", str(tmp_path / "var"), *args]
    return zygote.run(command, timeout=120, env=environ, cwd=tmp_path)


@pytest.mark.parametrize(
    ("text", "env", "says"),
    [
        (None, {}, "configuration file {path} not found"),
        ('home = "unterminated\n', {}, "configuration file {path} is not valid TOML"),
        ("[s3]\nendpoint_url = 5\n", {}, "s3.endpoint_url in configuration file {path}"),
        ("", {"DATAHUB_CACHE_RAM_BYTES": "lots"}, "DATAHUB_CACHE_RAM_BYTES"),
    ],
    ids=["missing", "not-toml", "wrong-type", "bad-variable"],
)
def test_a_configuration_mistake_is_one_line_not_a_traceback(
    tmp_path: Path, text: str | None, env: dict[str, str], says: str
) -> None:
    path = tmp_path / "datahub.toml"
    if text is not None:
        path.write_text(text)
    run = datahub(tmp_path, "--config", str(path), "dataset", "list", env=env)
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr and run.stderr.startswith("error: "), run.stderr
    assert says.format(path=path) in run.stderr and len(run.stderr.splitlines()) == 1, run.stderr
    as_json = datahub(tmp_path, "--json", "--config", str(path), "dataset", "list", env=env)
    assert as_json.returncode == 2 and json.loads(as_json.stderr)["error"]["code"] == "invalid_input"


@pytest.mark.parametrize(
    ("args", "env", "names"),
    [(("serve", "--port", "80000"), {}, "(--port)"), (("serve",), {"DATAHUB_API_PORT": "70000"}, "(--port)")],
    ids=["flag", "variable"],
)
def test_a_port_out_of_range_says_so(
    tmp_path: Path, args: tuple[str, ...], env: dict[str, str], names: str
) -> None:
    """It answered "datahub serve failed: OverflowError: bind(): port must be 0-65535.; this is a
    datahub bug"."""
    run = datahub(tmp_path, *args, env=env)
    assert run.returncode == 2, run.stderr
    port = args[-1] if len(args) > 1 else env["DATAHUB_API_PORT"]
    assert run.stderr == f"error: port {port} is not a TCP port: use 1-65535 {names}\n"


def test_a_state_directory_that_cannot_be_made_is_named_with_the_way_to_choose_another(
    tmp_path: Path,
) -> None:
    """A --home under a file (as one on a read-only or unmounted path): "datahub init failed:
    FileNotFoundError ...; this is a datahub bug", and make run printed a traceback."""
    (tmp_path / "a-file").write_text("")
    home = tmp_path / "a-file" / "home"
    for args in (("init",), ("import", str(tmp_path), "--to", "d")):
        run = datahub(tmp_path, "--home", str(home), *args)
        assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
        assert (
            f"error: cannot create the state directory {home}: Not a directory; choose another with --home DIR"
            in (run.stderr)
        )
    demo = zygote.run(
        [sys.executable, "-m", "datahub.demo", "--no-wait", "--port", "0", "--skip", "mount"],
        timeout=120,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("DATAHUB_")},
            "DATAHUB_HOME": str(home),
        },
        cwd=REPO,
    )
    assert demo.returncode == 2 and "Traceback" not in demo.stderr, demo.stderr
    assert demo.stderr == (
        f"error: cannot create the state directory {home}: Not a directory; choose another with "
        "DATAHUB_HOME=DIR make run, or .venv/bin/python -m datahub.demo --home DIR\n"
    )
