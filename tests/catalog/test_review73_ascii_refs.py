"""review73: a version written with another script's digits read another version.

``Catalog.resolve`` matched a version number with ``\\d`` and read it with ``int()``, both of
which take any script's decimal digits: ``ds@v৪`` (a Bengali 4, drawn like an 8) read version
4 through the API, the browser, ``datahub://`` and the torch datasets, while the CLI refused
the same text (``validation.is_ref`` takes 0-9 only). ``datahub commit --base ৪`` committed on
version 4. A version is written with the digits 0-9 everywhere now; any other is refused as
no version, naming what was typed, never resolved.
"""

from __future__ import annotations

import contextlib
import io
import json
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.browser.lineage import origin
from datahub.catalog import Catalog, open_catalog
from datahub.catalog.model import Put, Record
from datahub.cli.main import main
from datahub.cli.serve_cmd import build_app
from datahub.config import Config, load_config
from datahub.errors import InvalidName
from datahub.fs import DatahubFileSystem
from datahub.storage import StoreRegistry

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

VERSIONS = 8
#: Bengali 4 (drawn like 8), Arabic-Indic 3, full-width 3, Devanagari 1 (a "v" before, or not)
REFS = ["v\u09ea", "\u09ea", "v\u0663", "\uff13", "v\u0967"]


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Config, Catalog, StoreRegistry]]:
    """Dataset ``ds``: version k's ``a.txt`` reads ``version k`` (k = 1..8)."""
    root = tmp_path_factory.mktemp("ascii-refs")
    config = load_config(env={}, overrides={"home": str(root / "var")})
    (root / "origin").mkdir()
    stores = StoreRegistry(config)
    origin_store = stores.store((root / "origin").as_uri())
    catalog = open_catalog(config.resolved_catalog_url)
    catalog.create_dataset("ds")
    for k in range(1, VERSIONS + 1):
        origin_store.put(f"a{k}.txt", f"version {k}".encode())
        ref = origin_store.ref(f"a{k}.txt")
        catalog.commit("ds", [Put(Record("a.txt", ref.url, ref.etag, ref.size))], message=f"version {k}")
    yield config, catalog, stores
    catalog.close()
    stores.close()


@pytest.mark.parametrize("ref", REFS)
def test_the_catalog_and_datahub_urls_refuse_other_digits(home: tuple[Config, Catalog], ref: str) -> None:
    config, catalog, _ = home
    with pytest.raises(InvalidName) as refused:
        catalog.resolve("ds", ref)
    assert f"invalid version 'ds@{ref}'" in refused.value.message
    filesystem = DatahubFileSystem(config)
    try:
        assert filesystem.cat_file("datahub://ds@v4/a.txt") == b"version 4"
        with pytest.raises(InvalidName):  # the base read some version's bytes
            filesystem.cat_file(f"datahub://ds@{ref}/a.txt")
    finally:
        filesystem.close()
    assert catalog.resolve("ds", "v8").seq == 8 and catalog.resolve("ds", "8").seq == 8


@pytest.fixture(scope="module")
def client(home: tuple[Config, Catalog, StoreRegistry]) -> Iterator[TestClient]:
    """``datahub serve``'s app (API and browser) in local mode."""
    config, catalog, stores = home
    app, cache = build_app(config, catalog, stores, labelx=False)
    try:
        with TestClient(app, base_url="http://127.0.0.1") as client:
            yield client
    finally:
        cache.close()


@pytest.mark.parametrize("ref", REFS)
def test_the_api_and_the_browser_refuse_other_digits(client: TestClient, ref: str) -> None:
    api = client.get(f"/v1/datasets/ds/versions/{ref}")
    assert api.status_code == 400, api.text
    assert "invalid version" in api.json()["error"]["message"]
    page = client.get(f"/v1/datasets/ds/versions/{ref}/records", params={"limit": 1})
    assert page.status_code == 400, page.text
    browser = client.get(f"/datasets/ds/versions/{ref}")
    assert browser.status_code == 400 and "invalid version" in browser.text, browser.text[:300]
    assert "version 4" in client.get("/datasets/ds/versions/v4").text  # the page names its message
    assert client.get("/v1/datasets/ds/versions/v8").json()["seq"] == 8


def test_lineage_names_a_version_in_digits_0_to_9_only() -> None:
    assert origin({"derived_from": "ds@v\u09ea"}).source is None
    assert origin({"derived_from": "ds@v4"}).source == ("ds", 4)


def test_commit_base_takes_digits_0_to_9_only(
    home: tuple[Config, Catalog, StoreRegistry], tmp_path: Path
) -> None:
    config, catalog, _ = home
    changes = tmp_path / "changes.jsonl"
    put = {"op": "put", "record": {"key": "b.txt", "url": "file:///x", "etag": "e", "size": 1}}
    changes.write_text(json.dumps(put) + "\n")
    err = io.StringIO()
    argv = ["--home", str(config.home_path), "commit", "ds", "--changes", str(changes), "--base", "\u09ea"]
    with (
        contextlib.redirect_stderr(err),
        contextlib.redirect_stdout(io.StringIO()),
        pytest.raises(SystemExit) as ended,
    ):
        main(argv)
    assert ended.value.code == 2, err.getvalue()
    assert "--base" in err.getvalue()
    assert catalog.store.head("ds") == VERSIONS  # nothing committed on version 4
