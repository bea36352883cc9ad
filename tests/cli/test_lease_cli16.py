"""lease16: ``datahub lease show|break NAME`` over a real ``datahub serve`` (the API's routes
decide who may) and on an embedded catalog; docs/cli.md's "Writer leases" block runs here as
written (its server URL swapped for this test's)."""

from __future__ import annotations

import json
import re
import shlex
import uuid
from pathlib import Path

import pytest

from datahub.api.tokens import issue_token
from datahub.catalog.http_store import HttpCatalogStore
from datahub.cli.main import main
from tests.catalog.remote import serve

REPO = Path(__file__).resolve().parents[2]
DOC_URL = "http://localhost:8080"


def docs_block() -> list[str]:
    """The command lines of the bash block under docs/cli.md's "Writer leases" heading."""
    text = (REPO / "docs" / "cli.md").read_text()
    section = text.split("## Writer leases", 1)[1].split("\n## ", 1)[0]
    body = re.search(r"```bash\n(.*?)```", section, re.S)
    assert body, "docs/cli.md's Writer leases section shows no bash block"
    return [line for line in body.group(1).splitlines() if line.strip() and not line.startswith("#")]


@pytest.fixture
def remote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A served catalog where ``pets`` is bob's to write and eve squats ``training`` (bound to
    her own ``eve-out``, for an hour): the case the break is for."""
    server, backing, admin = serve(tmp_path)
    tokens = {"admin": admin, **{who: issue_token(backing.store, who)[0] for who in ("bob", "eve")}}
    backing.create_dataset("pets", owner="root", acl={"bob": "writer"})
    backing.create_dataset("eve-out", owner="eve")
    eve = HttpCatalogStore(server.url, tokens["eve"])
    squat = eve.acquire_lease("training", uuid.uuid4().hex, "eve's laptop", 3600, "eve-out")
    eve.close()
    monkeypatch.delenv("DATAHUB_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    try:
        yield server.url, tokens, squat
    finally:
        server.stop()
        backing.close()


def run(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_docs_lease_commands_free_a_squatted_workspace_for_its_tenant(
    remote, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    url, tokens, squat = remote
    monkeypatch.setenv("DATAHUB_API_TOKEN", tokens["admin"])
    monkeypatch.setenv("DATAHUB_HOME", str(tmp_path / "client"))
    lines = docs_block()
    assert any(" lease show " in line for line in lines) and any(" lease break " in line for line in lines)
    for line in lines:
        argv = shlex.split(line.replace(DOC_URL, url))
        assert argv[0] == "datahub", line
        code, out, err = run(capsys, *argv[1:])
        assert code == 0, (line, err)
        assert squat.owner not in out + err  # the holder's secret is never shown
    bob = HttpCatalogStore(url, tokens["bob"])
    try:
        taken = bob.acquire_lease("training", uuid.uuid4().hex, "bob's node", 60, "pets")
        assert (taken.epoch, taken.dataset) == (squat.epoch + 1, "pets")
    finally:
        bob.close()


def test_show_tells_state_holder_and_target_and_who_may_not_see_or_break_is_told_why(
    remote, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    url, tokens, squat = remote
    dh = ("--catalog", url)
    monkeypatch.setenv("DATAHUB_API_TOKEN", tokens["eve"])
    code, out, err = run(capsys, *dh, "--json", "lease", "show", "training")
    assert code == 0, err
    shown = json.loads(out)
    assert (shown["holder"], shown["dataset"], shown["state"], shown["epoch"]) == (
        "eve's laptop [eve]",
        "eve-out",
        "held",
        1,
    )
    assert "owner" not in shown and squat.owner not in out
    code, out, err = run(capsys, *dh, "lease", "break", "training")
    assert code == 6 and "only a global admin may break" in err and "Traceback" not in err, err

    monkeypatch.setenv("DATAHUB_API_TOKEN", tokens["bob"])  # not a writer of eve-out: not shown
    code, out, err = run(capsys, *dh, "lease", "show", "training")
    assert code == 3 and "has no writer lease" in err and "eve-out" not in err and out == "", err

    monkeypatch.setenv("DATAHUB_API_TOKEN", tokens["admin"])
    code, out, err = run(capsys, *dh, "lease", "break", "training")
    assert code == 0 and "nobody renews it; held until" in out and "[eve]" in out, err
    code, out, err = run(capsys, *dh, "lease", "show", "training")
    assert code == 0 and re.search(r"^state\s+broken$", out, re.M), out
    code, out, err = run(capsys, *dh, "lease", "break", "nothing-here", "--at-once")
    assert code == 3 and "'nothing-here' has no writer lease (nothing to break)" in err, err
    code, out, err = run(capsys, *dh, "lease", "break", "training", "--dataset", "Bad Name")
    assert code == 2 and "Traceback" not in err, err


def test_on_an_embedded_catalog_show_and_break_need_no_server(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whoever has the catalog file is its admin: no token, no role check."""
    monkeypatch.delenv("DATAHUB_CONFIG", raising=False)
    home = ("--home", str(tmp_path / "home"))
    assert run(capsys, *home, "init")[0] == 0
    from datahub.catalog import open_catalog

    catalog = open_catalog(f"sqlite:///{tmp_path / 'home' / 'catalog.db'}")
    try:
        lease = catalog.store.acquire_lease("scratch", uuid.uuid4().hex, "host h pid 7", 600)
    finally:
        catalog.close()
    code, out, err = run(capsys, *home, "lease", "show", "scratch")
    assert code == 0 and re.search(r"^state\s+held$", out, re.M) and lease.owner not in out, (out, err)
    code, out, err = run(capsys, *home, "--json", "lease", "break", "scratch", "--at-once")
    assert code == 0 and json.loads(out)["state"] == "free", (out, err)
    assert json.loads(out)["expires"] == 0.0
    code, out, err = run(capsys, *home, "lease", "show", "never")
    assert code == 3 and "'never' has no writer lease" in err, err
