"""review21c: attacks on lognext21's adoption (docs/writeback.md, "A lost node's acknowledged
files"), on a local shared tier and on S3 (moto), with lognext21's two-node ``Pair``.

1. The header's ``objects_url`` check compares what the store registry takes for one folder:
   a lost node whose configuration spelled the same flush target another way (``file://localhost/``
   for ``file:///``, an upper-case scheme) wrote a header the adopter refused, and its
   acknowledged files could not be adopted at all.
2. ``await_fenced`` after a break at once that a third node's take and release hid: the row
   read before the take is the release, and the broken holder still acknowledged files.
3. A ``partial`` adoption killed -9 half-way and run again: the refusal without ``partial``
   said "nothing was adopted" of files this node had taken already.
4. ``partial`` with renames, an unlink and an evicted older version: a guard (it passed on
   lognext21's code; a mutant whose ``_unwhole`` finds every file whole fails it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.catalog.sqlite_store import SQLiteCatalogStore
from datahub.config import load_config
from datahub.errors import StorageError
from datahub.storage import StoreRegistry
from datahub.writeback import open_workspace
from datahub.writeback.adopt import adopt_journal, await_fenced
from tests.writeback.conftest import CHUNK
from tests.writeback.test_lognext21 import WS, Pair, _two_broken
from tests.writeback.test_lognext21_fence import (
    REPO,
    TTL,
    adopted_every_ack,
    node_a_acknowledging,
)
from tests.writeback.test_nodeloss20 import _files, _put


@pytest.fixture(params=["local", "s3"])
def pair(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Pair]:
    endpoint = request.getfixturevalue("moto_endpoint") if request.param == "s3" else None
    p = Pair(tmp_path, endpoint)
    yield p
    p.close()


def _respell_a(pair: Pair, url: str) -> None:
    """Node a's configuration names the objects folder as ``url`` (the same folder as b's)."""
    pair.stores["a"].close()
    pair.overrides["a"]["objects_url"] = url
    pair.config["a"] = load_config(env={}, overrides=pair.overrides["a"])
    pair.stores["a"] = StoreRegistry(pair.config["a"])


@pytest.mark.parametrize("spelling", ["file://localhost{}", "FILE://{}/"])
def test_a_header_spelling_the_same_folder_another_way_is_adopted(pair: Pair, spelling: str) -> None:
    """Before (lognext21): Conflict 'says that journal flushed to file://localhost/…', nothing
    adopted, although the registry opens both spellings as one store: the evicted file's bytes
    were readable where the header said."""
    objects = pair.tmp / "objects"
    _respell_a(pair, spelling.format(objects.as_uri().removeprefix("file://")))
    assert pair.stores["a"].store(pair.config["a"].resolved_objects_url) is not None

    def writes(a) -> None:
        _put(a, "evicted", b"e" * (2 * CHUNK + 3))
        _put(a, "kept", b"k" * 10)
        a.flush()
        assert a.flusher.evict(0) > 0

    journal = pair.lose_a(writes)
    b = pair.open("b")
    try:
        report = adopt_journal(b, journal, pair.stores["b"])
        assert sorted(report.files) == ["evicted", "kept"]
        assert _files(b) == {"evicted": b"e" * (2 * CHUNK + 3), "kept": b"k" * 10}
    finally:
        b.close()


# --- 2. a lease broken at once, then taken and released by a third node ---------------------------


def test_a_lease_broken_at_once_then_released_by_a_third_still_waits_for_the_old_holder(
    tmp_path: Path,
) -> None:
    """lognext21's window again, one step longer: the lease is broken at once, a third node
    takes it and releases it (a short job on node c), then b adopts. The row b reads before its
    take is c's release, which ``await_fenced`` took for "released: no wait", while a still
    acknowledged files (its last renewal began before the break). Before: 0 s waited, and the
    files a acknowledged after b's log read were in no journal once a was killed -9."""
    with node_a_acknowledging(tmp_path) as (pair, leases, proc, out, journal):
        assert leases.break_lease(WS, at_once=True) is not None
        c = leases.acquire_lease(WS, "node c", "host c", TTL)  # node c's job, over at once
        leases.release_lease(WS, c.owner, c.epoch)
        before = leases.lease(WS)
        assert before is not None and before.owner == "node c" and before.expires <= 0
        b = open_workspace(WS, pair.config["b"], pair.stores["b"], lease=leases, lease_ttl=TTL)
        try:
            assert await_fenced(b, leases, before, ttl=TTL) > 0  # before: 0.0
            adopt_journal(b, journal, pair.stores["b"])
            out.wait(lambda x: x.startswith("FENCED"))  # a stopped on its own clock
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            adopted_every_ack(out, b)
        finally:
            b.close()


# --- 3. a partial adoption killed half-way, run again --------------------------------------------

#: node b's adoption, ``--partial``, killed -9 once it has written its first file
ADOPTER = r"""
import json, sys, threading
from datahub.catalog.sqlite_store import SQLiteCatalogStore
from datahub.config import load_config
from datahub.storage import StoreRegistry
from datahub.writeback import open_workspace
import datahub.writeback.adopt as adopt

args = json.loads(sys.argv[1])
config = load_config(env={}, overrides=args["overrides"])
stores = StoreRegistry(config)
ws = open_workspace("shared", config, stores, lease=SQLiteCatalogStore(args["catalog"]), lease_ttl=600.0)
copy = adopt._copy

def first_then_hang(ws, lost, item, origin, chunk_size):
    copy(ws, lost, item, origin, chunk_size)
    print("COPIED", item.path, flush=True)
    threading.Event().wait()

adopt._copy = first_then_hang
adopt.adopt_journal(ws, args["journal"], stores, partial=True)
"""


def test_a_partial_adoption_killed_half_way_is_finished_by_a_run_again(pair: Pair) -> None:
    """The first run wrote 'dir-ok-2' and died (kill -9). Run again without ``partial``, the
    refusal said "nothing was adopted" though that file was this node's already (before); now
    it says an earlier run wrote some and how to finish. Run with ``partial``: every whole file
    adopted once, the list of the others in the report and in the marker, marker done."""
    journal, keys = _two_broken(pair)
    args = {"overrides": pair.overrides["b"], "catalog": str(pair.catalog_path), "journal": journal}
    proc = subprocess.Popen(
        [sys.executable, "-c", ADOPTER, json.dumps(args)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        assert line.strip() == "COPIED dir-ok-2", line or proc.stderr.read()  # type: ignore[union-attr]
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate()
    marker = pair.marker(journal)
    assert (
        marker is not None
        and not marker["done"]
        and [i["path"] for i in marker["not_adopted"]] == ["ckpt", "log"]
    )
    leases = SQLiteCatalogStore(pair.catalog_path)
    try:
        assert leases.break_lease(WS, at_once=True) is not None  # the adopter is dead: kill -9
        b = open_workspace(WS, pair.config["b"], pair.stores["b"], lease=leases, lease_ttl=600.0)
        try:
            assert _files(b) == {"dir-ok-2": b"whole too"}  # acknowledged by its close
            with pytest.raises(StorageError) as err:
                adopt_journal(b, journal, pair.stores["b"])
            message = str(err.value)
            assert "nothing was adopted" not in message, message
            assert "an earlier run" in message and "--partial" in message and journal in message
            report = adopt_journal(b, journal, pair.stores["b"], partial=True)
            assert sorted(report.files) == ["dir-ok-2", "ok-1"]
            assert [i["path"] for i in report.not_adopted] == ["ckpt", "log"]
            assert _files(b) == {"ok-1": b"whole", "dir-ok-2": b"whole too"}
        finally:
            b.close()
    finally:
        leases.close()
    marker = pair.marker(journal)
    assert marker is not None and marker["done"] and marker["not_adopted"] == report.not_adopted


# --- 4. partial: renames, unlinks and an evicted older version -----------------------------------


def test_partial_never_gives_an_older_version_or_a_removed_name(pair: Pair) -> None:
    """Node a: 'old' flushed and evicted (its bytes only in its flushed object), then
    overwritten (v2, whose chunk the shared tier loses), then renamed into a renamed directory;
    'gone' written and unlinked; 'moved' renamed. A partial adoption takes what is whole under
    its last names, lists 'd2/new' (v2's chunk), and never shows v1's bytes, 'gone', or a name
    a rename left."""
    lost_keys: list[str] = []

    def writes(a) -> None:
        a.mkdir("d1")
        _put(a, "d1/old", b"v1, flushed and evicted " * 50)
        a.flush()
        assert a.flusher.evict(0) > 0
        _put(a, "d1/old", b"v2, acknowledged, its chunk lost")
        lost_keys.append(a.journal_record("d1/old")["chunks"]["0"][0])
        _put(a, "gone", b"unlinked")
        a.unlink("gone")
        _put(a, "moved-from", b"renamed")
        a.rename("moved-from", "moved-to")
        a.rename("d1", "d2")
        a.rename("d2/old", "d2/new")

    journal = pair.lose_a(writes)
    pair.shared.delete(lost_keys[0])
    b = pair.open("b")
    try:
        report = adopt_journal(b, journal, pair.stores["b"], partial=True)
        assert [i["path"] for i in report.not_adopted] == ["d2/new"]
        assert lost_keys[0] in report.not_adopted[0]["why"]
        assert _files(b) == {"moved-to": b"renamed"}
        assert sorted(name for name, _ in b.listdir("")) == ["d2", "moved-to"]
        assert b.listdir("d2") == []
    finally:
        b.close()
