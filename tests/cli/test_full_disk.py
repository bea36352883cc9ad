"""A full file system under the home: the API still serves, and every command says what is wrong.

Seen in a chaos soak: `datahub serve`, restarted after a kill on a full disk, died opening
its LMDB disk cache (``lmdb.DiskError``) with a bare traceback, and stayed down, although the
catalog API does not need that cache. These tests fill a real tmpfs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import lmdb
import pytest
from fastapi.testclient import TestClient

from datahub.cache.disk import DiskTier
from datahub.catalog import open_catalog
from datahub.cli.main import main
from datahub.cli.serve_cmd import build_app
from datahub.config import Config, load_config
from datahub.storage import StoreRegistry
from tests import zygote
from tests.tmpfs import small_tmpfs

# a local-mode app answers only requests addressed to this machine (datahub/api/local_mode.py)
LOCAL = "http://127.0.0.1"


@pytest.fixture
def small_fs(tmp_path: Path):
    with small_tmpfs(tmp_path / "small", "8m") as mountpoint:
        yield mountpoint


def fill(fs: Path) -> None:
    """Write until the file system refuses: what a runaway log or a full cache does. Unbuffered:
    a buffered file kept the tail of the last, partly written block and raised ENOSPC again at
    its close (whenever the free space was not a multiple of the block: a catalog one page
    larger made it so)."""
    with open(fs / "ballast", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass


def home_config(fs: Path) -> Config:
    return load_config(env={}, overrides={"home": str(fs / "home")})


def test_the_api_serves_from_a_full_disk_without_its_disk_cache(small_fs: Path) -> None:
    config = home_config(small_fs)
    catalog = open_catalog(config.resolved_catalog_url)  # held open, as a killed server leaves -wal/-shm
    stores = StoreRegistry(config)
    try:
        catalog.create_dataset("kept")
        app, cache = build_app(config, catalog, stores)  # the first start made the disk cache's index
        cache.close()
        fill(small_fs)
        app, cache = build_app(config, catalog, stores)
        try:
            assert not any(isinstance(t, DiskTier) for t in cache.tiers), "no disk tier on a full disk"
            with TestClient(app, base_url=LOCAL) as client:
                assert client.get("/healthz").status_code == 200
                listed = client.get("/v1/datasets")
                assert listed.status_code == 200 and [d["name"] for d in listed.json()] == ["kept"]
        finally:
            cache.close()
    finally:
        stores.close()
        catalog.close()


def run_cli(config: Config, *args: str) -> subprocess.CompletedProcess:
    # a fork of the worker's pre-imported interpreter (tests/zygote.py), or a fresh one
    cmd = [sys.executable, "-m", "datahub.cli.main", "--home", config.home, *args]
    return zygote.run(cmd, timeout=60, cwd=os.getcwd())


def test_a_catalog_on_a_full_disk_is_reported_as_full_not_as_a_broken_disk(small_fs: Path) -> None:
    config = home_config(small_fs)
    assert run_cli(config, "dataset", "create", "first").returncode == 0
    fill(small_fs)
    res = run_cli(config, "dataset", "create", "second")
    assert res.returncode == 7, res.stderr  # NoSpace's exit code
    assert "is full" in res.stderr and "free space" in res.stderr
    assert "Traceback" not in res.stderr
    (small_fs / "ballast").unlink()
    listed = run_cli(config, "dataset", "list")
    assert listed.returncode == 0 and "first" in listed.stdout and "second" not in listed.stdout


@pytest.mark.parametrize(
    ("raised", "code", "words"),
    [
        (lmdb.DiskError("mdb_txn_commit: No space left on device"), 7, "free space on that file system"),
        (ValueError("an invariant broke"), 1, "this is a datahub bug"),
    ],
)
def test_an_error_no_layer_translated_is_one_line_naming_the_command(
    config: Config, monkeypatch, capsys, raised: Exception, code: int, words: str
) -> None:
    """The runner's last guard: a library's own exception never reaches a user as a traceback."""

    assert main(["--home", config.home, "init"]) == 0
    capsys.readouterr()

    def failing_open_catalog(*_args, **_kwargs):
        raise raised

    monkeypatch.setattr("datahub.catalog.open_catalog", failing_open_catalog)
    assert main(["--home", config.home, "dataset", "list"]) == code
    err = capsys.readouterr().err
    assert err.startswith("error: datahub dataset failed:") and words in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert main(["--home", config.home, "-v", "dataset", "list"]) == code
    assert "Traceback" in capsys.readouterr().err  # -v shows where
