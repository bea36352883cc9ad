"""gaps26: ``datahub token list``, and ``token revoke`` without the secret in argv.

Before, the id of a token was printed once by ``token create`` and nothing showed it again, so
the only way to revoke a token handed out long ago was its secret, given as an argument:
readable by every local user in /proc/PID/cmdline while the command ran, and kept in the
shell's history (still live there if the revoke failed). Now ``token list`` shows every
token's principal, id, admin flag, description and creation time and never a secret;
``token revoke -`` reads the secret (or id) from stdin; a secret on argv is still revoked,
with a warning naming the risk and the safer form. docs/cli.md's "API tokens" block runs here
as written, in bash, with the id ``token create`` printed in place of ``ID``.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from datahub.api.tokens import hash_token
from datahub.catalog.sqlite_store import SQLiteCatalogStore
from datahub.cli.main import main
from tests import zygote

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@pytest.fixture
def run(capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """``datahub --home HOME ARGS`` in-process, stdin the text given; (exit code, stdout, stderr)."""
    monkeypatch.delenv("DATAHUB_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)  # no ./datahub.toml but the test's

    def run(home: Path, *args: str, stdin: str = "") -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        code = main(["--home", str(home), *args])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def _create(run, home: Path, principal: str, *flags: str) -> dict:
    code, out, err = run(home, "--json", "token", "create", "--principal", principal, *flags)
    assert code == 0, err
    return json.loads(out)


def _ids(run, home: Path) -> list[str]:
    code, out, err = run(home, "--json", "token", "list")
    assert code == 0, f"token list exited {code}: {err}"
    return [row["id"] for row in json.loads(out)]


def test_token_list_shows_each_token_and_never_a_secret(run, tmp_path: Path) -> None:
    home = tmp_path / "var"
    ci = _create(run, home, "ci-bot", "--description", "nightly CI")
    admin = _create(run, home, "alice", "--admin")
    code, listed, err = run(home, "--json", "token", "list")
    assert code == 0, f"token list exited {code}: {err}"
    rows = json.loads(listed)
    assert [(r["principal"], r["id"], r["admin"], r["description"]) for r in rows] == [
        ("alice", admin["id"], True, ""),
        ("ci-bot", ci["id"], False, "nightly CI"),
    ]
    assert all(set(r) == {"principal", "id", "admin", "description", "created"} for r in rows)
    assert all(isinstance(r["created"], float) and r["created"] > 1e9 for r in rows)
    code, table, _ = run(home, "token", "list")
    assert code == 0 and ci["id"] in table and "nightly CI" in table
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", table), table
    only = json.loads(run(home, "--json", "token", "list", "--principal", "ci-bot")[1])
    assert [r["id"] for r in only] == [ci["id"]]
    for out in (listed, table):
        assert ci["token"] not in out and admin["token"] not in out
        assert "dh_" not in out  # no secret, nor a piece of one
    # the id is what revoke takes
    code, out, err = run(home, "token", "revoke", ci["id"])
    assert code == 0 and "ci-bot" in out and err == ""
    assert _ids(run, home) == [admin["id"]]


def test_revoke_reads_the_secret_from_stdin_and_warns_of_one_on_argv(run, tmp_path: Path) -> None:
    home = tmp_path / "var"
    leaked = _create(run, home, "leaky")
    code, out, err = run(home, "token", "revoke", "-", stdin=leaked["token"] + "\n")
    assert code == 0, f"revoke - exited {code}: {err}"
    assert "leaky" in out and "warning" not in err
    assert leaked["id"] not in _ids(run, home)
    # an id on stdin works too (`token list --json | jq -r ... | datahub token revoke -`)
    other = _create(run, home, "other")
    assert run(home, "token", "revoke", "-", stdin=other["id"] + "\n")[0] == 0
    # nothing on stdin: refused, nothing revoked
    kept = _create(run, home, "kept")
    code, _, err = run(home, "token", "revoke", "-", stdin="")
    assert code == 2 and "read no token from stdin" in err and "nothing was revoked" in err, err
    assert kept["id"] in _ids(run, home)
    # a secret on argv (scripts written before `-`): revoked, and the user told why not to
    code, _, said = run(home, "token", "revoke", kept["token"])
    assert code == 0 and kept["id"] not in _ids(run, home)
    assert said.startswith("warning: the token's secret was given on the command line"), said
    assert "/proc/PID/cmdline" in said and "history" in said and "datahub token revoke -" in said
    assert kept["token"] not in said  # the warning never repeats the secret


def test_a_secret_piped_to_a_real_process_is_revoked(tmp_path: Path) -> None:
    """``revoke -`` as a shell runs it: the secret on a pipe, a process of its own."""
    home = tmp_path / "var"
    cmd = [sys.executable, "-m", "datahub.cli.main", "--home", str(home)]
    made = zygote.run([*cmd, "--json", "token", "create", "--principal", "p"], timeout=120, cwd=REPO)
    secret = json.loads(made.stdout)["token"]
    proc = zygote.run([*cmd, "token", "revoke", "-"], input=secret + "\n", timeout=120, cwd=REPO)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert "revoked token" in proc.stdout


def test_the_stores_list_tokens_without_secrets(tmp_path: Path) -> None:
    """Every store lists what it keeps: the SQLite file here, MongoDB in
    tests/catalog/test_conformance.py, refused over HTTP in tests/catalog/test_http_store.py."""
    from datahub.api.tokens import issue_token

    store = SQLiteCatalogStore(tmp_path / "c.db")
    try:
        _, first = issue_token(store, "zed", clock=lambda: 2e9)
        _, second = issue_token(store, "amy", admin=True, description="ops", clock=lambda: 2e9 + 1)
        assert [(t.principal, t.token_hash, t.is_admin) for t in store.list_tokens()] == [
            ("amy", second.token_hash, True),
            ("zed", first.token_hash, False),
        ]
    finally:
        store.close()


def _doc_block() -> list[str]:
    section = (REPO / "docs" / "cli.md").read_text().split("## API tokens", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [line for line in block.splitlines() if line.strip()]


def test_the_docs_token_block_runs_as_written(run, tmp_path: Path) -> None:
    home = tmp_path / "var"
    leaked = _create(run, home, "deploy-bot")  # the token a job had in $DATAHUB_API_TOKEN
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "DATAHUB_HOME": str(home)}
    env["DATAHUB_API_TOKEN"] = leaked["token"]
    env.pop("DATAHUB_CONFIG", None)
    lines = _doc_block()
    assert len(lines) == 5 and lines[0].startswith("datahub token create")
    made_id = ""
    for line in lines:
        if " ID " in f"{line} ":
            assert made_id, "the block revokes an id before it created a token"
            line = re.sub(r"\bID\b", made_id, line, count=1)
        proc = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", line], cwd=tmp_path, env=env,
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert proc.returncode == 0, f"{line!r} exited {proc.returncode}: {proc.stderr}"
        assert "warning" not in proc.stderr, f"{line!r}: {proc.stderr}"
        found = re.search(r"\bid ([0-9a-f]{64})\b", proc.stdout)
        if line.startswith("datahub token create") and found:
            made_id = found.group(1)
    assert made_id and hash_token(leaked["token"]) == leaked["id"]
    assert _ids(run, home) == []  # both revoked: ci-bot's by id, deploy-bot's by its secret on stdin


@pytest.mark.parametrize("action", [("list",), ("revoke", "-")])
def test_token_commands_over_a_server_are_refused_naming_it(
    run, tmp_path: Path, action: tuple[str, ...]
) -> None:
    """``--catalog http://…``: tokens live in the server's own catalog (no API routes)."""
    code, _, err = run(tmp_path / "var", "--catalog", "http://127.0.0.1:9", "token", *action, stdin="x\n")
    assert code == 2 and "on the API server" in err, err
