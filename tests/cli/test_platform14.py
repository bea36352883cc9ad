"""The CLI as docs/deployment.md drives it (platform14).

docs/deployment.md told operators to create a node's token with ``datahub token create
<principal>``, which the CLI refuses (``--principal`` is required). tests/test_docs_commands.py
let it pass: an inline span the parser refuses only for a missing argument is taken as prose
naming a command, and this one gave its argument in the wrong place. The commands an operator
copies to hand out access, ``datahub token create`` and ``datahub dataset update``, must parse
as shown wherever the docs give them with arguments, inline or fenced.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import zygote
from tests.doc_commands import checked_commands, parse_error


@pytest.mark.parametrize("words", [("token", "create"), ("dataset", "update")])
def test_the_access_commands_the_docs_show_parse_as_written(words: tuple[str, str]) -> None:
    shown = [  # with arguments: a bare `datahub token create` in prose names the command
        c
        for c in checked_commands()
        if c.program == "datahub" and c.args[: len(words)] == words and len(c.args) > len(words)
    ]
    assert len(shown) >= 3, shown
    refused = [
        f"{c.shown.where}: `{c.shown.text}`: {error}"
        for c in shown
        if (error := parse_error(c.program, c.args)) is not None
    ]
    assert not refused, "\n".join(refused)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_with_a_bad_commit_sources_setting_stops_before_it_says_it_serves(
    tmp_path: Path, workers: str
) -> None:
    """``api.commit_sources`` (docs/deployment.md, "Where records may point") is checked
    before the server binds or prints that it serves. Before, it was checked as each process
    built its app: ``datahub serve`` printed "datahub API on …", then the error; with
    ``--workers 2`` each worker died and was started again until the supervisor gave up; and
    every attempt left the disk cache it had opened unclosed, so the next start rebuilt its
    index as after a crash."""
    proc = _serve_with_api_setting(tmp_path, 'commit_sources = "s3://team-bucket/raw"', workers)
    err = proc.stderr
    assert proc.returncode != 0, err
    assert "setting api.commit_sources" in err and "'s3://team-bucket/raw'" in err and "ending in /" in err, (
        err
    )
    assert "datahub API on" not in err and "worker" not in err and "Traceback" not in err, err
    assert not (tmp_path / "var" / "cache").exists(), err  # nothing opened


def _serve_with_api_setting(tmp_path: Path, setting: str, workers: str) -> subprocess.CompletedProcess:
    """``datahub serve --auth`` with one ``[api]`` setting line, as a user starts it (no DATAHUB_ env)."""
    config = tmp_path / "datahub.toml"
    config.write_text(f'home = "{tmp_path / "var"}"\n[api]\n{setting}\n')
    argv = [
        sys.executable,
        "-m",
        "datahub.cli.main",  # the console script's main, in a fork of a pre-imported interpreter
        "--config",
        str(config),
        "serve",
        "--auth",
        "--no-labelx",
        "--port",
        "0",
        "--workers",
        workers,
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("DATAHUB_")}
    return zygote.run(argv, cwd=tmp_path, env=env, timeout=120)  # a hang guard


def test_serve_with_a_bad_metrics_principals_setting_stops_before_it_says_it_serves(tmp_path: Path) -> None:
    """sec25: ``api.metrics_principals`` is checked where ``api.commit_sources`` is, before the
    server binds or says it serves (not by each worker building its app)."""
    proc = _serve_with_api_setting(tmp_path, 'metrics_principals = "prometheus bad/name"', "2")
    err = proc.stderr
    assert proc.returncode != 0, err
    assert "setting api.metrics_principals: invalid principal 'bad/name'" in err, err
    assert "datahub API on" not in err and "worker" not in err and "Traceback" not in err, err
    assert not (tmp_path / "var" / "cache").exists(), err  # nothing opened


def test_a_serve_that_fails_while_building_its_app_closes_the_cache_it_opened(tmp_path: Path) -> None:
    """A start that fails after the disk cache is open (here LabelX cannot open
    ``<home>/labelx.db``, a directory) closes that cache: the next start finds it closed and
    does not rebuild its index as after a crash (mount's twin: tests/fuse/test_lifecycle.py)."""
    config = tmp_path / "datahub.toml"
    config.write_text(f'home = "{tmp_path / "var"}"\n')
    (tmp_path / "var" / "labelx.db").mkdir(parents=True)
    datahub = str(Path(sys.executable).with_name("datahub"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("DATAHUB_")}
    runs = [
        subprocess.run(
            [datahub, "--config", str(config), "serve", "--port", "0"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,  # a hang guard
        )
        for _ in range(2)
    ]
    assert all(run.returncode != 0 for run in runs), runs
    assert (tmp_path / "var" / "cache" / "disk").is_dir(), runs[0].stderr  # the cache was opened
    assert "a previous process did not close it" not in runs[1].stderr, runs[1].stderr
