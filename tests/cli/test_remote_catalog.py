"""End to end with ``catalog_url = http://...``: the CLI and ``datahub://`` work through a real
``datahub serve`` (uvicorn on 127.0.0.1) exactly as against the embedded SQLite catalog; the
client holds only the API token (``$DATAHUB_API_TOKEN``)."""

from __future__ import annotations

import json
from pathlib import Path

import fsspec
import pytest

from datahub.cli.main import main
from tests.catalog.remote import serve
from tests.ingest.conftest import write_tree

FILES = {"train/cat/1.jpg": b"c1", "train/dog/2.jpg": b"d2", "val/cat/3.jpg": b"c3"}


@pytest.fixture
def remote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    server, backing, token = serve(tmp_path)
    monkeypatch.setenv("DATAHUB_API_TOKEN", token)
    monkeypatch.delenv("DATAHUB_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    try:
        yield server.url, backing
    finally:
        server.stop()
        backing.close()


def test_cli_and_fsspec_through_the_api(remote, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    url, backing = remote
    home = str(tmp_path / "client")  # the client's own cache; no catalog file of its own

    def dh(*args: str) -> tuple[int, str, str]:
        code = main(["--home", home, "--catalog", url, "--json", *args])
        out, err = capsys.readouterr()
        return code, out, err

    src = write_tree(tmp_path / "src", FILES)
    code, out, err = dh("import", str(src), "--to", "pets", "-m", "first")
    assert code == 0 and json.loads(out)["version"] == 1, err
    changes = tmp_path / "changes.jsonl"
    changes.write_text(
        json.dumps({"op": "patch", "key": "train/cat/1.jpg", "labels": {"class": "cat"}})
        + "\n"
        + json.dumps({"op": "delete", "key": "train/dog/2.jpg"})
        + "\n"
    )
    code, out, err = dh("commit", "pets", "--changes", str(changes), "--base", "1", "--commit-id", "c-1")
    assert code == 0, err
    code, _, err = dh("commit", "pets", "--changes", str(changes), "--base", "1")
    assert code == 4 and "head is now version 2" in err  # StaleBase came back as itself: exit 4
    assert dh("tag", "pets", "golden", "1")[0] == 0
    code, out, _ = dh("ls", "pets@golden")
    assert code == 0 and [json.loads(line)["key"] for line in out.splitlines()] == sorted(FILES)
    code, out, _ = dh("ls", "pets", "--filter", "labels.class=cat")
    assert [json.loads(line)["key"] for line in out.splitlines()] == ["train/cat/1.jpg"]
    assert [v["seq"] for v in json.loads(dh("log", "pets")[1])] == [2, 1]
    code, _, err = dh("ls", "nope")
    assert code == 3 and "'nope'" in err  # DatasetNotFound: exit 3, as locally
    # the server's catalog holds it all (the client wrote nothing locally)
    assert [v.seq for v in backing.log("pets")] == [2, 1] and backing.resolve("pets", "golden").seq == 1
    assert not (tmp_path / "client" / "catalog.db").exists()

    with fsspec.open("datahub://pets@golden/train/dog/2.jpg", catalog_url=url, home=home) as f:
        assert f.read() == b"d2"
    fs = fsspec.filesystem("datahub", catalog_url=url, home=home, skip_instance_cache=True)
    assert fs.cat("datahub://pets@v2/train/cat/1.jpg") == b"c1"
    assert sorted(fs.find("datahub://pets@v2/")) == ["pets@v2/train/cat/1.jpg", "pets@v2/val/cat/3.jpg"]
