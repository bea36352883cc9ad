"""leftovers18 through the real CLI: other users' strings in the lines a command writes itself
and in ``error:`` lines reach a terminal escaped (``datahub.console.context.shown``); ``datahub
lease prune``; ``datahub cache flush NAME`` of a workspace that is not there names it."""

from __future__ import annotations

import json
import sqlite3

from datahub.catalog import Put, Record, open_catalog
from datahub.config import load_config
from datahub.storage import StoreRegistry
from datahub.writeback import open_workspace
from tests.cli.test_cli import dh  # noqa: F401 - the fixture

HOLDER = "host a pid 1\x1b[2J\x1b]0;owned\x07\nerror: forged line"


def _raw_lease(tmp_path, name: str, holder: str, expires: float, owner: str = "o") -> None:
    """A lease row as a node with direct catalog access (or a datahub before review17b) wrote it."""
    with sqlite3.connect(tmp_path / "var" / "catalog.db.leases") as conn:  # the leases' own file
        conn.execute(
            "INSERT OR REPLACE INTO leases (name, owner, holder, epoch, expires, dataset) VALUES (?, ?, ?, 1, ?, '')",
            (name, owner, holder, expires),
        )


def _safe(text: str) -> bool:
    return "\x1b" not in text and "\x07" not in text and "\nerror: forged" not in text


def test_holders_in_lines_and_errors_reach_the_terminal_escaped(dh, tmp_path) -> None:  # noqa: F811
    assert dh("init")[0] == 0
    _raw_lease(tmp_path, "ws", HOLDER, 4e9)
    code, out, err = dh("lease", "break", "ws")
    assert code == 0 and _safe(out), out
    assert "host a pid 1\\x1b[2J\\x1b]0;owned\\x07\\x0aerror: forged line" in out
    assert json.loads(dh("lease", "show", "ws", json_output=True)[1])["holder"] == HOLDER  # exact
    # an error quoting the holder: a flush of a workspace whose lease another node holds
    config = load_config(env={}, overrides={"home": str(tmp_path / "var")})
    with StoreRegistry(config) as stores:
        open_workspace("job", config, stores, background=False).close()
    _raw_lease(tmp_path, "job", HOLDER, 4e9, owner="another node")
    code, out, err = dh("cache", "flush", "job")
    assert code == 4 and "is open for writing elsewhere" in err and _safe(err), err
    # the error is one line, the last (a progress line comes before it only once work began)
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and err.splitlines()[-1] == errors[0], err
    assert errors[0].startswith("error: workspace 'job' is open"), err
    code, _, err = dh("cache", "flush", "job", json_output=True)
    assert code == 4 and json.loads(err)["error"]["details"]["holder"] == HOLDER


def test_flush_of_an_unknown_workspace_names_it_and_those_there(dh, tmp_path, capsys) -> None:  # noqa: F811
    assert dh("init")[0] == 0
    config = load_config(env={}, overrides={"home": str(tmp_path / "var")})
    with StoreRegistry(config) as stores:
        open_workspace("job", config, stores, background=False).close()
    code, _, err = dh("cache", "flush", "nope")
    assert code == 3 and "workspace 'nope' not found" in err and "(workspaces there: job)" in err, err
    code, _, err = dh("cache", "flush", "--workspace", "nope")
    assert code == 3 and "workspace 'nope' not found" in err, err
    code, _, err = dh("cache", "flush", "job", "--workspace", "nope")
    assert code == 2 and "two workspaces named" in err, err
    code, out, _ = dh("cache", "flush", "job", json_output=True)
    assert code == 0 and [row["workspace"] for row in json.loads(out)] == ["job"]
    # any other stray word: the usage of the command it was given to, not the whole tool's
    try:
        dh("cache", "stats", "extra")
    except SystemExit as exc:
        assert exc.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: datahub cache stats") and "unrecognized arguments: extra" in err, err


def test_lease_prune_deletes_free_and_long_lapsed_leases_only(dh, tmp_path) -> None:  # noqa: F811
    assert dh("init")[0] == 0
    catalog = open_catalog(f"sqlite:///{tmp_path / 'var' / 'catalog.db'}")
    try:
        store = catalog.store
        store.acquire_lease("released", "o1", "host a", 60)
        store.release_lease("released", "o1", 1)
        store.acquire_lease("held", "o2", "host b", 60)
    finally:
        catalog.close()
    _raw_lease(tmp_path, "lapsed-a-day", "host c", 1_000_000_000.0)
    _raw_lease(tmp_path, "lapsed-a-minute", "host d", 0.0)  # free
    code, out, _ = dh("lease", "prune", json_output=True)
    assert code == 0 and json.loads(out) == {  # "released" was freed a moment ago: kept (its target too)
        "pruned": 2,
        "names": ["lapsed-a-day", "lapsed-a-minute"],  # 0.0: freed before the time was kept
    }
    listed = json.loads(dh("lease", "list", json_output=True)[1])
    assert [row["name"] for row in listed] == ["held", "released"]
    code, out, _ = dh("lease", "prune")
    assert code == 0 and out.startswith("pruned 0 writer leases"), out
    code, _, err = dh("lease", "prune", "--lapsed-for", "60")
    assert code == 2 and "at least 3600 s" in err, err


def test_a_version_holding_a_key_and_keys_under_it_lists_both(dh, tmp_path) -> None:  # noqa: F811
    """``x`` and ``x/y`` in one version (legal, as on S3: docs/catalog.md, "Limits"): the CLI
    and the browser list both, each with its own record; none drops one or mixes them up."""
    from datahub.browser.folders import browse

    assert dh("init")[0] == 0
    config = load_config(env={}, overrides={"home": str(tmp_path / "var")})
    puts = []
    with StoreRegistry(config) as stores:
        objects = stores.store(config.resolved_objects_url)
        for key, data in (("x", b"file x"), ("x/y", b"file under x"), ("z", b"z")):
            info = objects.put(f"o/{key.replace('/', '_')}", data)
            puts.append(Put(Record(key, objects.url_for(info.key), info.etag, info.size)))
    catalog = open_catalog(f"sqlite:///{tmp_path / 'var' / 'catalog.db'}")
    try:
        catalog.create_dataset("ds")
        catalog.commit("ds", puts)
        entries, _ = browse(catalog, "ds", 1)
        assert [(e.name, e.is_folder) for e in entries] == [("x", False), ("x/", True), ("z", False)]
        assert entries[0].record.size == 6
    finally:
        catalog.close()
    assert [line.split()[:2] for line in dh("ls", "ds")[1].splitlines()] == [
        ["x", "6"],
        ["x/y", "12"],
        ["z", "1"],
    ]
    assert dh("diff", "ds", "0", "1")[1].splitlines() == ["+ x", "+ x/y", "+ z"]
    exported = [json.loads(line) for line in dh("export", "ds")[1].splitlines()]
    assert [(r["key"], r["size"], r["url"].rsplit("/", 1)[1]) for r in exported] == [
        ("x", 6, "x"),
        ("x/y", 12, "x_y"),
        ("z", 1, "z"),
    ]
