"""The version page's PyTorch script, run as written, reads the records the page lists.

A folder that holds nothing (``?prefix=val/nope/`` with the filter ``labels.class=cat``) sent
the reader to the nearest folder above that holds anything, listed without the filter, while
its links and its snippets kept the filter: the page showed ``val/``'s three bird pictures and
its script died with "pets@v2 has no records under prefix 'val/' matching filter
'labels.class=cat'" (newuser43). The nearest folder is now the nearest holding a record the
filter matches, listed with it; where the filter matches no record of the version, the page
says so and its links and script drop it.

Each script is saved and run as its first line says (the server's python, home and catalog,
as ``datahub serve`` sets them), and the samples it reads are counted against the records
under the entries the page lists, as the page's own links select them.
"""

from __future__ import annotations

import html
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
from fastapi.testclient import TestClient

from tests.browser.conftest import Env

pytestmark = [pytest.mark.slow]  # each script imports torch and runs a DataLoader epoch


def _script(page: str) -> str:
    texts = re.findall(r'id="snippet-text-\d+"[^>]*>(.*?)</(?:code|pre)>', page, re.S)
    return html.unescape(texts[2])


def _listed(page: str) -> list[tuple[str, str, str]]:
    """(kind, path, filter) of each entry the page lists: its folders and files, or on a page
    of a folder that holds nothing, the entries of the folder it sends the reader to."""
    where = re.search(r'<ul class="entries" id="entries">(.*?)</ul>|id="no-records">(.*?)</p>', page, re.S)
    assert where is not None, page
    hrefs = [html.unescape(h) for h in re.findall(r'<a (?:class="mono" )?href="([^"]*)"', where.group(0))]
    listed = []
    for href in hrefs:
        parts = urlsplit(href)
        if "/records/" in parts.path:
            listed.append(("file", unquote(parts.path.split("/records/", 1)[1]), ""))
        else:
            query = parse_qs(parts.query, keep_blank_values=True)
            if parts.query and query.get("prefix", [""])[0]:
                listed.append(("folder", query["prefix"][0], query.get("filter", [""])[0]))
    return listed


def _expected(env: Env, listed: list[tuple[str, str, str]]) -> int:
    count = 0
    for kind, path, where in listed:
        if kind == "file":
            count += 1
        else:
            count += len(list(env.catalog.list_records("pets", 2, prefix=path, where=where or None)))
    return count


def _run(script: str, tmp_path: Path) -> subprocess.CompletedProcess:
    first = script.splitlines()[0]
    assert first == "# save as train.py, then run: python train.py", first
    (tmp_path / "train.py").write_text(script)
    return subprocess.run(
        [sys.executable, "train.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )


@pytest.fixture
def served(app, env: Env) -> TestClient:
    """The pages as ``datahub serve`` sets them: the script names the server's home and catalog."""
    app.state.browser.home = str(env.config.home_path)
    app.state.browser.catalog_url = env.config.catalog_url
    with TestClient(app, base_url="http://127.0.0.1") as c:
        yield c


@pytest.mark.parametrize(
    ("prefix", "where", "said", "kept"),
    [
        # the filter matches records elsewhere: the nearest folder holding one, listed with it
        ("val/nope/", "labels.class=cat", "The top level holds (matching labels.class=cat): train/.", True),
        ("train/nope/", "labels.class=bird", "The top level holds (matching labels.class=bird): val/.", True),
        # the filter matches no record of the version: said, and the links and script drop it
        (
            "train/nope/",
            "labels.class=zebra",
            "and none matches labels.class=zebra. train/ holds: cat/, dog/.",
            False,
        ),
        # a folder that holds records, filtered (as before)
        ("train/", "labels.class=dog", None, True),
    ],
)
def test_the_pytorch_script_reads_the_records_the_page_lists(
    served: TestClient, env: Env, tmp_path: Path, prefix: str, where: str, said: str | None, kept: bool
) -> None:
    page = served.get("/datasets/pets/versions/2", params={"prefix": prefix, "filter": where})
    assert page.status_code == 200
    listed = _listed(page.text)
    assert listed and all(f == (where if kept else "") for kind, _, f in listed if kind == "folder"), listed
    script = _script(page.text)
    assert (f"where={where!r}" in script) == kept, script
    proc = _run(script, tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    expected = _expected(env, listed)
    assert proc.stdout.strip().endswith(f"{expected} samples of pets@v2 read"), (proc.stdout, expected)
    if said is not None:
        text = re.sub(
            r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", "", page.text.split('id="no-records">')[1]))
        )
        assert text.startswith(f"No record of pets@v2 is under {prefix}") and said in text, text
