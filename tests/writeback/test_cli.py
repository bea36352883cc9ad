"""``datahub cache flush`` handler (wired into ``cache`` by cache_cmd; tested through its own parser)."""

from __future__ import annotations

import argparse
import io
import json

import pytest

from datahub.cli.context import CliContext
from datahub.cli.flush_cmd import add_flush_parser
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
