"""The fsspec ``datahub://`` file system and the cache CLI, over a real SQLite catalog."""

from __future__ import annotations

import io
import json

import fsspec
import pytest

from datahub.catalog import Put, Record, open_catalog
from datahub.cli.main import main
from datahub.errors import ReadOnly
from datahub.fs import DatahubFileSystem
from tests.cache.conftest import put_objects, with_cache

KEYS = ["a.txt", "img/cat/1.jpg", "img/cat/2.jpg", "img/dog/1.jpg", "z/deep/er/f.bin"]


@pytest.fixture
def dataset(config, source):
    """Dataset ``ds``: v1 holds KEYS, v2 replaces a.txt."""
    objects = put_objects(source, [100, 3000, 50, 1024, 0])
    catalog = open_catalog(config.resolved_catalog_url)
    catalog.create_dataset("ds")
    records = {
        key: Record(key, ref.url, ref.etag, ref.size) for key, (ref, _) in zip(KEYS, objects, strict=True)
    }
    catalog.commit("ds", [Put(r) for r in records.values()], message="first")
    [(new_ref, new_data)] = put_objects(source, [10], seed=9, prefix="v2")
    catalog.commit("ds", [Put(Record("a.txt", new_ref.url, new_ref.etag, new_ref.size))], message="second")
    catalog.close()
    return {key: data for key, (_, data) in zip(KEYS, objects, strict=True)} | {"a.txt@v2": new_data}


@pytest.fixture
def fs(config, dataset):
    filesystem = DatahubFileSystem(with_cache(config, page_size=1024))
    yield filesystem
    filesystem.close()


def test_listing_info_and_find(fs) -> None:
    assert fs.ls("", detail=False) == ["ds"]
    assert fs.ls("ds@v1", detail=False) == ["ds@v1/a.txt", "ds@v1/img", "ds@v1/z"]
    assert fs.ls("datahub://ds@1/img/", detail=False) == ["ds@1/img/cat", "ds@1/img/dog"]
    assert fs.ls("ds@v1/img/cat/1.jpg", detail=False) == ["ds@v1/img/cat/1.jpg"]
    info = fs.info("ds@v1/img/cat/1.jpg")
    assert info["type"] == "file" and info["size"] == 3000 and info["etag"]
    assert fs.info("ds@v1/z/deep")["type"] == "directory"
    assert fs.info("ds")["type"] == "directory"
    assert fs.find("ds@v1/img") == ["ds@v1/img/cat/1.jpg", "ds@v1/img/cat/2.jpg", "ds@v1/img/dog/1.jpg"]
    assert len(fs.find("ds@v1")) == 5
    assert fs.isdir("ds@v1/img") and fs.isfile("ds@v1/a.txt") and not fs.exists("ds@v1/nope")
    with pytest.raises(FileNotFoundError):
        fs.info("ds@v1/img/cow")
    with pytest.raises(FileNotFoundError):
        fs.ls("ds@v9")
    with pytest.raises(FileNotFoundError):
        fs.info("nosuch@v1/x")


def test_reading_versions_through_the_cache(fs, dataset) -> None:
    assert fs.cat("ds@v1/img/cat/1.jpg") == dataset["img/cat/1.jpg"]
    assert fs.cat_file("ds@v1/img/cat/1.jpg", 1000, 2100) == dataset["img/cat/1.jpg"][1000:2100]
    assert fs.cat_file("ds@v1/img/cat/1.jpg", -10) == dataset["img/cat/1.jpg"][-10:]
    assert fs.cat("ds@v1/a.txt") == dataset["a.txt"]
    assert fs.cat("ds/a.txt") == fs.cat("ds@latest/a.txt") == dataset["a.txt@v2"]
    assert fs.cat("ds@v1/z/deep/er/f.bin") == b""
    with fs.open("ds@v1/img/cat/1.jpg") as f:
        assert f.read(10) == dataset["img/cat/1.jpg"][:10]
        f.seek(2048)
        assert f.read() == dataset["img/cat/1.jpg"][2048:]
    fetches = fs.cache.origin.counters.fetches
    assert fs.cat("ds@v1/img/cat/1.jpg") == dataset["img/cat/1.jpg"]
    assert fs.cache.origin.counters.fetches == fetches  # served by the cache


def test_writes_are_refused(fs) -> None:
    with pytest.raises(ReadOnly):
        fs.open("ds@v1/a.txt", "wb")
    with pytest.raises(ReadOnly):
        fs.rm("ds@v1/a.txt")
    with pytest.raises(ReadOnly):
        fs.mkdir("ds@v1/new")


def test_protocol_is_registered_with_fsspec(config, dataset) -> None:
    assert fsspec.get_filesystem_class("datahub") is DatahubFileSystem
    with fsspec.open("datahub://ds@v1/img/dog/1.jpg", config=config) as f:
        assert f.read() == dataset["img/dog/1.jpg"]
    fsspec.filesystem("datahub", config=config).close()


def run_cli(config, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    import contextlib

    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["--home", config.home, "--json", *argv])
    return code, out.getvalue(), err.getvalue()


def test_cli_prefetch_pin_unpin_and_stats(config, dataset, monkeypatch) -> None:
    monkeypatch.setenv("DATAHUB_CACHE_PAGE_SIZE", "1024")
    code, out, _ = run_cli(config, "prefetch", "ds@v1", "--prefix", "img/")
    report = json.loads(out)
    assert (
        code == 0 and report["objects"] == 3 and report["pages_fetched"] == 5 and report["version"] == "ds@v1"
    )
    code, out, _ = run_cli(config, "prefetch", "ds@v1")  # resumes: only what is missing
    report = json.loads(out)
    assert report["objects"] == 5 and report["pages_fetched"] == 1 and report["pages_cached"] == 5
    code, out, _ = run_cli(config, "cache", "pin", "ds@v2")
    assert code == 0 and json.loads(out)["pages_fetched"] == 1  # the new a.txt
    code, out, _ = run_cli(config, "cache", "pins")
    assert json.loads(out) == [{"pin": "ds@v2", "objects": 5}]
    code, out, _ = run_cli(config, "cache", "stats")
    stats = json.loads(out)
    disk = next(t for t in stats["tiers"] if t["tier"] == "disk")
    assert disk["used_bytes"] == 100 + 3000 + 50 + 1024 + 10 and disk["entries"] == 7
    assert stats["pins"] == {"ds@v2": 5}
    code, out, _ = run_cli(config, "cache", "unpin", "ds@2")
    assert code == 0 and json.loads(out) == {"unpinned": "ds@v2", "found": True}
    code, _, err = run_cli(config, "prefetch", "nosuch@v1")
    assert code == 3 and "nosuch" in err


def test_cli_text_output_for_people(config, dataset, monkeypatch, capsys) -> None:
    monkeypatch.setenv("DATAHUB_CACHE_PAGE_SIZE", "1024")
    assert main(["--home", config.home, "prefetch", "ds@v1"]) == 0
    captured = capsys.readouterr()
    assert "prefetch ds@v1: 5/5 (100%)" in captured.err  # the progress line
    assert main(["--home", config.home, "cache", "stats"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:4] == ["TIER", "USED", "LIMIT", "PAGES"]
    assert "disk" in out and "4.1 KiB" in out and "0 running cache processes" in out


def test_find_with_depth_and_directories_falls_back_to_walking(fs) -> None:
    assert fs.find("ds@v1", maxdepth=1) == ["ds@v1/a.txt"]
    found = fs.find("ds@v1/img", withdirs=True)
    assert "ds@v1/img/cat" in found and "ds@v1/img/cat/1.jpg" in found


def test_cli_stats_shows_write_back_workspaces(config, stores) -> None:
    from datahub.writeback import open_workspace

    ws = open_workspace("outputs", config, stores, background=False)
    with ws, ws.open("ckpt.bin", create=True) as fh:
        fh.write(0, b"x" * 5000)
    code, out, _ = run_cli(config, "cache", "stats")
    [row] = json.loads(out)["workspaces"]
    assert code == 0 and row["workspace"] == "outputs" and row["dirty_bytes"] == 0  # closing flushed it


def test_versions_with_deep_records_stored_earlier_stay_readable(config, dataset, fs) -> None:
    """Records whose meta is nested 300 and 5,000 deep (stored before datahub refused that; the
    deeper one as raw catalog text, which ``json.loads`` alone cannot decode) list and read."""
    import sqlite3

    catalog = open_catalog(config.resolved_catalog_url)
    a = catalog.get_record("ds", 2, "a.txt")
    deep: dict = {"leaf": 1}
    for _ in range(299):
        deep = {"n": deep}
    changes = [Put(Record(k, a.url, a.etag, a.size, "", deep, {"x": 1})) for k in ("deep.txt", "deeper.txt")]
    catalog.store.commit("ds", 2, changes)
    catalog.close()
    with sqlite3.connect(config.resolved_catalog_url.removeprefix("sqlite:///")) as conn:
        conn.execute(
            "UPDATE records SET meta = ? WHERE key = 'deeper.txt'", ('{"n":' * 5000 + "1" + "}" * 5000,)
        )
    assert {"ds@v3/deep.txt", "ds@v3/deeper.txt"} <= set(fs.ls("ds@v3", detail=False))
    assert fs.info("ds@v3/deeper.txt")["size"] == a.size and len(fs.find("ds@v3")) == 7
    assert fs.cat("ds@v3/deep.txt") == fs.cat("ds@v3/deeper.txt") == dataset["a.txt@v2"]
    for ref in ("99999999999999999999", f"v{2**70}"):
        with pytest.raises(FileNotFoundError):
            fs.ls(f"ds@{ref}")


_READ_AND_EXIT = """
import sys, fsspec
with fsspec.open(sys.argv[1], home=sys.argv[2]) as f:
    sys.stdout.write(str(len(f.read())))
"""


def test_stats_after_another_process_read_through_fsspec_and_exited(config, dataset) -> None:
    """A reader that never calls close() (a pandas/torch user) still leaves its disk tier closed:
    ``cache stats`` counts its pages and the next user of the tier trusts the index."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = str(Path(__file__).resolve().parents[2])
    env = {k: v for k, v in os.environ.items() if not k.startswith("DATAHUB_")} | {"PYTHONPATH": repo}

    def read(key: str) -> subprocess.CompletedProcess:
        argv = [sys.executable, "-c", _READ_AND_EXIT, f"datahub://ds@v1/{key}", config.home]
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)

    first = read("img/cat/1.jpg")
    assert first.returncode == 0 and first.stdout == "3000", first.stderr
    code, out, _ = run_cli(config, "cache", "stats")
    disk = next(t for t in json.loads(out)["tiers"] if t["tier"] == "disk")
    assert code == 0 and disk["used_bytes"] == 3000 and disk["entries"] >= 1
    second = read("img/dog/1.jpg")  # the next user of the disk tier
    assert second.returncode == 0 and second.stdout == "1024", second.stderr
    assert "index rebuilt" not in second.stderr and "did not close" not in second.stderr, second.stderr
    code, out, _ = run_cli(config, "cache", "stats")
    disk = next(t for t in json.loads(out)["tiers"] if t["tier"] == "disk")
    assert disk["used_bytes"] == 3000 + 1024
