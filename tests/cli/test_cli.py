"""The ``datahub`` command end to end on the embedded default: output, --json and exit codes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from datahub.cli.main import main
from tests import zygote
from tests.ingest.conftest import write_tree

REPO = Path(__file__).resolve().parents[2]
FILES = {"train/cat/1.jpg": b"c1", "train/dog/2.jpg": b"d2", "val/cat/3.jpg": b"c3"}


@pytest.fixture
def dh(tmp_path, capsys, monkeypatch):
    """Run ``datahub --home <tmp> ...`` in-process; returns (exit code, stdout, stderr)."""
    monkeypatch.delenv("DATAHUB_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    home = str(tmp_path / "var")

    def run(*args: str, json_output: bool = False):
        argv = ["--home", home, *(["--json"] if json_output else []), *args]
        code = main(argv)
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture
def src(tmp_path) -> Path:
    return write_tree(tmp_path / "src", FILES)


def test_init_is_idempotent(dh, tmp_path):
    code, out, _ = dh("init", json_output=True)
    assert code == 0 and json.loads(out)["catalog"].endswith("var/catalog.db")
    assert (tmp_path / "var" / "catalog.db").exists() and (tmp_path / "var" / "objects").is_dir()
    assert dh("init")[0] == 0


def test_dataset_create_list_show_update(dh):
    assert dh("dataset", "create", "pets", "--description", "Pets", "--acl", "alice=reader")[0] == 0
    code, out, _ = dh("dataset", "list")
    assert code == 0 and out.splitlines()[0].split()[:3] == ["NAME", "HEAD", "OWNER"] and "pets" in out
    shown = json.loads(dh("dataset", "show", "pets", json_output=True)[1])
    assert shown["acl"] == {"alice": "reader"} and shown["head"] == 0
    code, out, _ = dh("dataset", "update", "pets", "--grant", "bob=writer", "--revoke", "alice")
    assert json.loads(dh("dataset", "show", "pets", json_output=True)[1])["acl"] == {"bob": "writer"}
    # a person reads what a table would show: JSON and dates, never Python's repr or epoch seconds
    fields = dict(line.split(None, 1) for line in out.splitlines() if len(line.split(None, 1)) == 2)
    assert code == 0 and fields["acl"] == '{"bob": "writer"}', out
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", fields["created_at"]), out


def test_import_log_ls_diff_tag_export(dh, src, tmp_path):
    code, out, err = dh("import", str(src), "--to", "pets", "-m", "first")
    assert code == 0 and "committed pets@v1: 3 added" in out and "import" in err  # progress on stderr
    code, out, _ = dh("import", str(src), "--to", "pets")
    assert code == 0 and "no changes" in out and "no version created" in out
    (src / "val/cat/3.jpg").unlink()
    write_tree(src, {"val/cat/4.jpg": b"c4"})
    report = json.loads(dh("import", str(src), "--to", "pets", json_output=True)[1])
    assert (report["version"], report["added"], report["removed"]) == (2, 1, 1)

    log = json.loads(dh("log", "pets", json_output=True)[1])
    assert [v["seq"] for v in log] == [2, 1] and log[1]["message"] == "first"
    code, out, _ = dh("ls", "pets@1")
    assert code == 0 and [line.split()[0] for line in out.splitlines()] == sorted(FILES)
    rows = [
        json.loads(line) for line in dh("ls", "pets", "--prefix", "val/", json_output=True)[1].splitlines()
    ]
    assert [r["key"] for r in rows] == ["val/cat/4.jpg"]
    code, out, err = dh("diff", "pets", "1", "2")
    assert (
        out.splitlines() == ["- val/cat/3.jpg", "+ val/cat/4.jpg"] and "1 added, 1 removed, 0 modified" in err
    )
    assert dh("tag", "pets", "golden", "1")[1].strip() == "pets@golden -> v1"
    assert dh("tag", "pets", "golden", "1")[0] == 0  # the same version again: nothing moves
    # issue 37 item 7: a tag that names another version is not moved silently
    code, _, err = dh("tag", "pets", "golden", "2")
    assert code == 4 and "already names v1" in err and "--force" in err
    assert dh("tag", "pets", "golden", "2", "--force")[1].strip() == "pets@golden -> v2 (moved from v1)"
    assert dh("tag", "pets", "golden", "1", "--force")[1].strip() == "pets@golden -> v1 (moved from v2)"
    code, out, _ = dh("export", "pets@golden")
    assert [json.loads(line)["key"] for line in out.splitlines()] == sorted(FILES)
    target = tmp_path / "out.ndjson"
    assert dh("export", "pets@v2", "-o", str(target))[0] == 0
    assert len(target.read_text().splitlines()) == 3
    assert dh("tag", "pets", "golden", "--delete")[0] == 0
    assert dh("ls", "pets@golden")[0] == 3


def test_commit_from_a_change_set_file(dh, src, tmp_path):
    dh("import", str(src), "--to", "pets")
    changes = tmp_path / "changes.jsonl"
    changes.write_text(
        json.dumps({"op": "patch", "key": "train/cat/1.jpg", "labels": {"class": "cat"}})
        + "\n\n"
        + json.dumps({"op": "delete", "key": "train/dog/2.jpg"})
        + "\n"
    )
    code, out, _ = dh("commit", "pets", "--changes", str(changes), "--base", "1", "-m", "label")
    assert (
        code == 0
        and "committed pets@v2 (2 records) from 2 changes: 0 added, 1 removed, 1 modified against v1" in out
    )
    rows = [
        json.loads(line)
        for line in dh("ls", "pets", "--filter", "labels.class=cat", json_output=True)[1].splitlines()
    ]
    assert [r["key"] for r in rows] == ["train/cat/1.jpg"]
    # the same file against the old base: stale, exit 4, nothing written
    code, _, err = dh("commit", "pets", "--changes", str(changes), "--base", "1")
    assert code == 4 and "head is now version 2" in err
    assert len(json.loads(dh("log", "pets", json_output=True)[1])) == 2


def test_malformed_change_set_names_the_line_and_commits_nothing(dh, src, tmp_path):
    dh("import", str(src), "--to", "pets")
    changes = tmp_path / "changes.jsonl"
    changes.write_text(json.dumps({"op": "delete", "key": "train/dog/2.jpg"}) + "\n" + '{"op": "explode"}\n')
    code, _, err = dh("commit", "pets", "--changes", str(changes))
    assert code == 2 and "line 2" in err
    assert len(json.loads(dh("log", "pets", json_output=True)[1])) == 1


def test_malformed_manifest_exit_code_and_message(dh, tmp_path):
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("file:///x/a.jpg\n{not json\n")
    code, _, err = dh("import", str(manifest), "--to", "pets", json_output=True)
    assert code == 2
    error = json.loads(err.strip().splitlines()[-1])["error"]
    assert error["code"] == "invalid_manifest" and error["details"]["line"] == 2
    assert json.loads(dh("dataset", "list", json_output=True)[1]) == []


@pytest.mark.parametrize(
    ("args", "code", "text"),
    [
        (("dataset", "create", "Bad!"), 2, "invalid dataset name"),
        (("dataset", "show", "ghost"), 3, "dataset 'ghost' not found"),
        (("log", "ghost"), 3, "'ghost'"),
        (("ls", "ghost@1"), 3, "'ghost'"),
        (("tag", "ghost", "t", "1"), 3, "'ghost'"),
        (("dataset", "create", "pets", "--acl", "x=owner"), 2, "invalid role"),
        (("token", "revoke", "deadbeef"), 3, "no such token"),
        (("serve", "--host", "0.0.0.0", "--local"), 2, "refusing local mode"),
    ],
)
def test_errors_map_to_documented_exit_codes(dh, args, code, text):
    assert dh("init")[0] == 0  # a catalog to look in (without one, reads exit 3 "no catalog at")
    got, _, err = dh(*args)
    assert got == code and text in err


def test_an_import_into_a_bad_name_starts_nothing(dh, src):
    """The name is refused before the import's progress line: it printed "import SRC: 0 0/s
    stopped by an error" above the real reason (newuser16)."""
    code, out, err = dh("import", str(src), "--to", "Bad Name!")
    assert code == 2 and "invalid dataset name 'Bad Name!'" in err
    assert "stopped by an error" not in err and f"import {src}" not in err and out == ""


def test_unknown_version_and_existing_name(dh, src):
    dh("import", str(src), "--to", "pets")
    assert dh("ls", "pets@9")[0] == 3
    assert dh("ls", "pets@nosuchtag")[0] == 3
    assert dh("dataset", "create", "pets")[0] == 4


def test_token_create_and_revoke(dh):
    created = json.loads(dh("token", "create", "--principal", "alice", json_output=True)[1])
    assert created["token"].startswith("dh_") and created["principal"] == "alice" and not created["admin"]
    code, out, _ = dh("token", "revoke", created["token"])
    assert code == 0 and "alice" in out
    assert dh("token", "revoke", created["id"])[0] == 3  # already revoked
    assert dh("token", "create", "--principal", "bad principal")[0] == 2


def test_derive(dh, tmp_path):
    manifest = tmp_path / "m.jsonl"
    images = write_tree(tmp_path / "img", FILES)
    manifest.write_text(
        "\n".join(
            json.dumps({"url": (images / k).as_uri(), "key": k, "labels": {"class": k.split("/")[1]}})
            for k in FILES
        )
    )
    dh("import", str(manifest), "--to", "pets")
    code, out, _ = dh("derive", "pets@1", "--where", "labels.class=cat", "--to", "cats")
    assert code == 0 and "committed cats@v1: 2 records" in out


def test_the_installed_command_runs_as_a_subprocess(tmp_path, src):
    """The console script itself; PYTHONPATH pins it to this working tree whatever the venv's install."""
    exe = Path(sys.executable).with_name("datahub")
    home = str(tmp_path / "var")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("DATAHUB_CONFIG", None)

    def run(*args: str) -> subprocess.CompletedProcess:
        cmd = [str(exe), "--home", home, *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)

    imported = run("--json", "import", str(src), "--to", "pets")
    assert imported.returncode == 0, imported.stderr
    assert json.loads(imported.stdout)["version"] == 1
    missing = run("log", "ghost")
    assert missing.returncode == 3 and "error: dataset 'ghost' not found" in missing.stderr
    assert "Traceback" not in missing.stderr


@pytest.fixture
def many(tmp_path) -> Path:
    """A home whose dataset ``many`` lists > 64 KiB (the pipe buffer) with ``ls`` and with ``log``,
    so a writer whose reader left always meets the closed pipe: 3000 records, 40 versions with
    long messages."""
    from datahub.catalog import Put, Record, open_catalog
    from datahub.config import load_config

    home = tmp_path / "var"
    blob = tmp_path / "blob.bin"
    blob.write_bytes(b"x")
    config = load_config(env={}, overrides={"home": str(home)})
    catalog = open_catalog(config.resolved_catalog_url)
    catalog.create_dataset("many")
    url, etag = blob.as_uri(), "e" * 32
    records = [Put(Record(f"train/sample-with-a-long-name-{i:06d}.jpg", url, etag, 1)) for i in range(3000)]
    catalog.commit("many", records, message="bulk")
    for n in range(40):
        catalog.commit("many", [Put(Record(f"extra/{n}.jpg", url, etag, 1))], message=f"{n} " + "m" * 4000)
    catalog.close()
    return home


@pytest.mark.parametrize("command", [["ls", "many"], ["log", "many"], ["--json", "ls", "many"]])
def test_a_reader_that_leaves_early_ends_the_command_quietly(many, command):
    """`datahub ls ds | head -1`: no BrokenPipeError traceback, no "Exception ignored" at
    shutdown, nothing at all on stderr; exit 141 (128 + SIGPIPE, as a shell reports for a
    writer killed by the signal)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DATAHUB_")} | {"PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "datahub.cli.main", "--home", str(many), *command]
    writer = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    first = writer.stdout.readline()
    writer.stdout.close()  # what `head -1` does after its line
    err = writer.stderr.read().decode()
    code = writer.wait(timeout=120)
    assert first.strip()
    assert err == ""
    assert code == 141


def test_the_whole_output_still_reaches_a_reader_that_stays(many):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DATAHUB_")} | {"PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "datahub.cli.main", "--home", str(many), "ls", "many"]
    done = zygote.run(argv, timeout=120, env=env, cwd=os.getcwd())  # a fork of a pre-imported interpreter
    assert done.returncode == 0 and done.stderr == "" and len(done.stdout.splitlines()) == 3040


def test_global_flags_after_the_subcommand(dh):
    assert dh("dataset", "create", "pets")[0] == 0
    before = dh("--json", "dataset", "list")
    after = dh("dataset", "list", "--json")
    assert before[0] == after[0] == 0
    assert json.loads(after[1]) == json.loads(before[1])


def test_global_flags_after_several_subcommands(tmp_path, src, capsys, monkeypatch):
    """Each global flag (--home, --json, -v, --catalog, --config) works after the subcommand,
    for plain and nested subcommands, and gives the same output as before it."""
    monkeypatch.delenv("DATAHUB_CONFIG", raising=False)
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")  # the default home (./var) is not the one used here
    home = str(tmp_path / "var")

    def run(*argv: str) -> tuple[int, str]:
        code = main(list(argv))
        return code, capsys.readouterr().out

    assert run("import", str(src), "--to", "pets", "--home", home, "--json")[0] == 0
    assert (tmp_path / "var" / "catalog.db").exists() and not (tmp_path / "var" / "var").exists()
    for command in (["ls", "pets"], ["log", "pets"], ["dataset", "show", "pets"], ["cache", "stats"]):
        code_before, before = run("--home", home, "--json", *command)
        code_after, after = run(*command, "--home", home, "--json")
        assert code_before == code_after == 0, command
        assert after == before and after.lstrip()[:1] in ("{", "["), command  # JSON both ways
    assert json.loads(run("log", "pets", "--json", "--home", home)[1])[0]["seq"] == 1
    (tmp_path / "home.toml").write_text(f'home = "{home}"\n')
    code, out = run("log", "pets", "--config", str(tmp_path / "home.toml"), "--json")
    assert code == 0 and json.loads(out)[0]["seq"] == 1  # the config file after the subcommand chose the home
    code, out = run("log", "pets", "--catalog", f"sqlite:///{home}/catalog.db", "--json")
    assert code == 0 and json.loads(out)[0]["seq"] == 1
    assert run("log", "pets", "--json")[0] == 3  # ./var has no such dataset: the flags above mattered


def test_global_flags_parse_the_same_before_and_after(tmp_path):
    from datahub.cli.main import build_parser

    parser = build_parser()
    after = parser.parse_args(
        ["cache", "stats", "-vv", "--json", "--home", "h", "--catalog", "c", "--config", "f"]
    )
    assert (after.verbose, after.json, after.home, after.catalog, after.config) == (2, True, "h", "c", "f")
    before = parser.parse_args(["-v", "--json", "--home", "h", "ls", "ds"])  # not reset by the copies
    assert (before.verbose, before.json, before.home) == (1, True, "h")
    plain = parser.parse_args(["ls", "ds"])
    assert (plain.verbose, plain.json, plain.home, plain.catalog, plain.config) == (
        0,
        False,
        None,
        None,
        None,
    )


def test_unknown_flag_after_subcommand_is_a_usage_error(dh, tmp_path):
    with pytest.raises(SystemExit) as exc:
        dh("dataset", "list", "--jsonn")
    assert exc.value.code == 2


@pytest.mark.parametrize(
    "args",
    [
        ("dataset", "list"),
        ("log", "pets"),
        ("ls", "pets@1"),
        ("dataset", "show", "pets"),
        ("tag", "pets", "g", "1"),
    ],
)
def test_a_command_that_reads_never_creates_a_catalog(tmp_path, capsys, monkeypatch, args):
    """Issue 37 item 6: ``datahub dataset list`` outside a checkout printed ``(none)`` and left a
    new ./var/catalog.db; ``--home /tmp/typo/dir`` created the whole tree."""
    monkeypatch.delenv("DATAHUB_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(list(args)) == 3
    err = capsys.readouterr().err
    assert f"no catalog at {tmp_path / 'var' / 'catalog.db'}" in err and "--home DIR" in err
    assert not (tmp_path / "var").exists()
    typo = tmp_path / "typo" / "dir"
    assert main(["--home", str(typo), *args]) == 3
    assert "init" in capsys.readouterr().err and not (tmp_path / "typo").exists()


def test_the_commands_that_create_still_create_a_catalog(dh, tmp_path):
    assert dh("dataset", "create", "pets")[0] == 0  # a fresh home: created on purpose
    assert dh("dataset", "list")[0] == 0


def test_prefetch_prints_sentences_and_whole_paths(dh, src):
    """Issue 37 item 7: ``datahub prefetch`` printed Python reprs (``[{'url': ...}]``) and an
    error that dropped the path's leading ``/``."""
    dh("import", str(src), "--to", "pets")
    gone = src / "val" / "cat" / "3.jpg"
    gone.unlink()
    code, out, err = dh("prefetch", "pets@1")
    assert code == 1, err
    assert out.splitlines()[0].startswith("prefetch pets@v1: 3 objects: ") and "1 failed" in out
    assert "{'" not in out and "PrefetchReport(" not in out and "[{" not in out
    assert f"(file {gone}) not found" in out  # the whole path, from its leading /
    assert str(gone).startswith("/")


def test_times_say_their_zone_and_match_the_browser(tmp_path, src):
    """`datahub log` and `dataset show` write times in UTC and say so, as the dataset browser
    does: a bare local time (`07:21:22`) read on a machine in another zone, or beside the
    browser's `07:21 UTC`, named another instant."""
    from datahub.browser.pages import _when

    exe = Path(sys.executable).with_name("datahub")
    env = {**os.environ, "PYTHONPATH": str(REPO), "TZ": "America/New_York"}
    env.pop("DATAHUB_CONFIG", None)

    def run(*args: str) -> str:
        cmd = [str(exe), "--home", str(tmp_path / "var"), *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    run("import", str(src), "--to", "pets")
    created = json.loads(run("--json", "log", "pets"))[0]["created_at"]
    utc = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(created))
    row = run("log", "pets").splitlines()[1]
    assert row.split(None, 1)[1].startswith(utc + " "), row
    assert utc[:16] + " UTC" == _when(created)  # the browser's minute, the same instant
    out = run("dataset", "show", "pets")
    shown = dict(line.split(None, 1) for line in out.splitlines() if len(line.split(None, 1)) == 2)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", shown["created_at"]), shown
