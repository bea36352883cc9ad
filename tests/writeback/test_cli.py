"""``datahub cache flush`` handler (wired into ``cache`` by cache_cmd; tested through its own parser)."""

from __future__ import annotations

import argparse
import io
import json

import pytest

from datahub.cli.flush_cmd import add_flush_parser
from datahub.console.context import CliContext
from datahub.errors import NotFound
from tests.writeback.conftest import Env


def run(env: Env, *argv: str) -> list[dict]:
    parser = argparse.ArgumentParser()
    add_flush_parser(parser.add_subparsers())
    args = parser.parse_args(["flush", *argv])
    out, err = io.StringIO(), io.StringIO()
    ctx = CliContext(env.config, json_output=True, out=out, err=err)
    try:
        assert args.func(args, ctx) == 0
    finally:
        ctx.close()
    return json.loads(out.getvalue())


def test_flush_all_workspaces_owned_or_not(env: Env) -> None:
    held = env.open("held")
    with held.open("a", create=True) as fh:
        fh.write(0, b"held by this process")
    idle = env.open("idle")
    with idle.open("b", create=True) as fh:
        fh.write(0, b"nobody holds me")
    idle.abandon()
    rows = run(env)
    assert {(r["workspace"], r["uploaded"]) for r in rows} == {("held", 1), ("idle", 1)}
    assert held.dirty() == []
    assert run(env, "--workspace", "held")[0]["uploaded"] == 0


def test_flush_unknown_workspace_is_a_clear_error(env: Env) -> None:
    with pytest.raises(NotFound, match="workspace 'nope' not found"):
        run(env, "--workspace", "nope")


def test_workspace_stats_from_another_process_while_held(env: Env) -> None:
    import subprocess
    import sys
    from pathlib import Path

    ws = env.open("held")
    with ws.open("a", create=True) as fh:
        fh.write(0, b"x" * 1000)
    code = (
        "import json, sys\n"
        "from datahub.config import load_config\n"
        "from datahub.writeback import workspace_stats\n"
        "cfg = load_config(env={}, overrides={'home': sys.argv[1]})\n"
        "print(json.dumps(list(workspace_stats(cfg))))\n"
    )
    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", code, env.config.home], cwd=repo, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)
    assert (row["workspace"], row["dirty_files"], row["dirty_bytes"], row["open"]) == ("held", 1, 1000, True)
    ws.flush()
    assert ws.stats()["dirty_files"] == 0
