"""bench/soak's pure parts: the fault schedule (a function of the seed alone) and the
checker's rules (workspace models from a writer's history, reads, the catalog invariants).
The soak itself runs in tests/multihost/test_soak.py."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from bench.soak import check
from bench.soak.schedule import KINDS, make_schedule


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- the schedule ------------------------------------------------------------------------------
@given(seed=st.integers(0, 2**32), duration=st.floats(30, 1800))
@settings(max_examples=25, deadline=None)
def test_the_same_seed_gives_the_same_schedule_and_faults_end_in_time(seed: int, duration: float) -> None:
    one, two = make_schedule(seed, duration), make_schedule(seed, duration)
    assert one == two
    assert all(f.at > 0 and f.until <= duration - 2.0 for f in one)
    assert [f.at for f in one] == sorted(f.at for f in one)
    for f in one:
        targets, lo, hi = KINDS[f.kind]
        assert f.target in targets and lo <= f.seconds <= hi


@given(seed=st.integers(0, 2**32))
@settings(max_examples=25, deadline=None)
def test_faults_of_one_kind_on_one_target_never_overlap(seed: int) -> None:
    faults = make_schedule(seed, 1800)
    by = {}
    for f in faults:
        by.setdefault((f.kind, f.target), []).append(f)
    for same in by.values():
        for first, second in zip(same, same[1:], strict=False):
            assert first.until < second.at


def test_a_short_run_sees_every_kind_and_a_long_one_enough_faults() -> None:
    assert {f.kind for f in make_schedule(26, 100)} == set(KINDS)
    assert len(make_schedule(26, 1800)) >= 200
    assert make_schedule(1, 600) != make_schedule(2, 600)


# --- workspace models ------------------------------------------------------------------------------
def ev(op: str, path: str, **kw: object) -> dict:
    return {"node": "a", "cycle": 0, "op": op, "path": path, "t": 0.0, **kw}


def test_an_acknowledged_file_must_be_there_byte_exact() -> None:
    model = check.workspace_models(
        [
            ev("intent", "f/1", kind="create", sha=sha(b"x"), prefix=None),
            ev("ack", "f/1", sha=sha(b"x"), at="close"),
        ]
    )[("a", 0)]
    assert check.check_workspace_version("v", model, {"f/1": sha(b"x")}) == []
    assert check.check_workspace_version("v", model, {}) != []  # lost
    assert check.check_workspace_version("v", model, {"f/1": sha(b"y")}) != []  # other bytes
    assert (
        check.check_workspace_version("v", model, {"f/1": sha(b"x"), "f/2": sha(b"")}) != []
    )  # never written


def test_a_failed_close_allows_old_new_empty_or_absent_but_never_a_torn_file() -> None:
    events = [
        ev("intent", "f/1", kind="create", sha=sha(b"abcd"), prefix=sha(b"ab")),
        ev("ack", "f/1", sha=sha(b"ab"), at="fsync"),
        ev("fail", "f/1", stage="close", err="errno:EIO"),
    ]
    model = check.workspace_models(events)[("a", 0)]
    for ok in (b"ab", b"abcd", b""):
        assert check.check_workspace_version("v", model, {"f/1": sha(ok)}) == []
    assert check.check_workspace_version("v", model, {"f/1": sha(b"abc")}) != []
    # a new file never closed may be absent (a crash loses it) ...
    assert check.check_workspace_version("v", model, {}) == []


def test_an_overwrite_that_failed_keeps_the_acknowledged_contents_even_when_the_disk_was_full() -> None:
    base = [
        ev("intent", "f/1", kind="create", sha=sha(b"old"), prefix=None),
        ev("ack", "f/1", sha=sha(b"old"), at="close"),
        ev("intent", "f/1", kind="overwrite", sha=sha(b"new"), prefix=None),
    ]
    eio = check.workspace_models([*base, ev("fail", "f/1", stage="close", err="errno:EIO")])[("a", 0)]
    assert check.check_workspace_version("v", eio, {}) != []  # acknowledged "old" may not vanish
    assert check.check_workspace_version("v", eio, {"f/1": sha(b"new")}) == []
    full = check.workspace_models([*base, ev("fail", "f/1", stage="close", err="errno:ENOSPC")])[("a", 0)]
    # docs/writeback.md, "Out of space at close": a full device reverts the file, never drops
    # what a close acknowledged
    assert check.check_workspace_version("v", full, {}) != []
    assert check.check_workspace_version("v", full, {"f/1": sha(b"old")}) == []


def test_renames_and_deletes_move_and_remove_acknowledged_files() -> None:
    events = [
        ev("intent", "f/1", kind="create", sha=sha(b"1"), prefix=None),
        ev("ack", "f/1", sha=sha(b"1"), at="close"),
        ev("intent", "f/2", kind="create", sha=sha(b"2"), prefix=None),
        ev("ack", "f/2", sha=sha(b"2"), at="close"),
        ev("intent", "f/1", kind="rename", to="f/r"),
        ev("ack", "f/1", at="rename", to="f/r"),
        ev("intent", "f/2", kind="delete"),
        ev("ack", "f/2", at="unlink"),
    ]
    model = check.workspace_models(events)[("a", 0)]
    assert check.check_workspace_version("v", model, {"f/r": sha(b"1")}) == []
    assert check.check_workspace_version("v", model, {"f/r": sha(b"1"), "f/2": sha(b"2")}) != []
    assert check.check_workspace_version("v", model, {"f/1": sha(b"1")}) != []


# --- reads -----------------------------------------------------------------------------------------
def test_reads_wrong_bytes_unclean_errors_stalls_and_enoent_outside_a_remount_are_violations() -> None:
    stats = check.ReadStats(gaps={("a", "mount"): [(10.0, 20.0)]})
    base = {"node": "a", "via": "mount", "ds": "src", "v": 1, "key": "k", "dt": 0.1}
    stats.add({**base, "t": 1.0, "ok": True, "bytes": 3, "wrong": False})
    assert stats.violations == [] and stats.verified == 1
    stats.add({**base, "t": 2.0, "ok": False, "err": "errno:EIO"})
    stats.add({**base, "t": 15.0, "ok": False, "err": "errno:ENOENT"})  # inside the remount gap
    assert stats.violations == []
    stats.add({**base, "t": 25.0, "ok": False, "err": "errno:ENOENT"})
    stats.add({**base, "t": 3.0, "ok": False, "wrong": True, "bytes": 3})
    stats.add({**base, "t": 4.0, "ok": False, "err": "unexpected:KeyError:x"})
    stats.add({**base, "t": 5.0, "ok": True, "bytes": 3, "wrong": False, "dt": 31.0})
    assert len(stats.violations) == 4 and stats.wrong == 1 and stats.longest == 31.0


# --- the catalog -----------------------------------------------------------------------------------
def catalog_db(tmp_path: Path) -> Path:
    from datahub.catalog.sqlite_schema import SCHEMA

    db = tmp_path / "catalog.db"
    con = sqlite3.connect(db)
    con.executescript(SCHEMA)
    con.execute("INSERT INTO datasets (id, name, created_at) VALUES (1, 'd', 0)")
    for seq, parent, cid, count, size in [(1, None, "c1", 1, 5), (2, 1, "c2", 2, 8)]:
        con.execute(
            "INSERT INTO versions (dataset_id, seq, parent, created_at, record_count, total_bytes, added, removed,"
            " modified, commit_id) VALUES (1, ?, ?, 0, ?, ?, 0, 0, 0, ?)",
            (seq, parent, count, size, cid),
        )
    con.execute("INSERT INTO records VALUES (1, 'a', 1, 9223372036854775807, 's3://b/a', 'e', 5, '', '', '')")
    con.execute("INSERT INTO records VALUES (1, 'b', 2, 9223372036854775807, 's3://b/b', 'e', 3, '', '', '')")
    con.execute("INSERT INTO tags VALUES (1, 'gold', 2)")
    con.commit()
    con.close()
    return db


def test_a_sound_catalog_passes_and_each_broken_invariant_is_named(tmp_path: Path) -> None:
    db = catalog_db(tmp_path)
    assert check.check_catalog(check.read_catalog(db)) == []
    con = sqlite3.connect(db)
    con.execute("INSERT INTO tags VALUES (1, 'ghost', 7)")
    con.execute("UPDATE versions SET total_bytes = 99 WHERE seq = 2")
    con.execute(
        "INSERT INTO versions (dataset_id, seq, parent, created_at, record_count, total_bytes, added, removed,"
        " modified, commit_id) VALUES (1, 4, 2, 0, 2, 8, 0, 0, 0, 'c4')"
    )
    con.execute("INSERT INTO datasets (id, name, created_at) VALUES (2, 'e', 0)")
    con.execute(
        "INSERT INTO versions (dataset_id, seq, parent, created_at, record_count, total_bytes, added, removed,"
        " modified, commit_id) VALUES (2, 1, NULL, 0, 0, 0, 0, 0, 0, 'c1')"
    )
    con.commit()
    con.close()
    bad = check.check_catalog(check.read_catalog(db))
    assert any("ghost" in b for b in bad)
    assert any("d@2" in b and "99" in b for b in bad)
    assert any("not 1..3" in b for b in bad)
    assert any("c1" in b and "twice" in b for b in bad)


def test_a_workspace_version_keeps_the_parents_files_the_workspace_never_held() -> None:
    """merge17: a workspace commit applies its own changes to the head; a file of an earlier
    cycle it never wrote is carried over with its record unchanged, and never dropped."""
    model = check.workspace_models(
        [
            {"node": "a", "cycle": 1, "op": "intent", "path": "f/new", "kind": "create", "sha": sha(b"n")},
            {"node": "a", "cycle": 1, "op": "ack", "path": "f/new", "at": "close", "sha": sha(b"n")},
            {"node": "a", "cycle": 1, "op": "intent", "path": "f/failed", "kind": "create", "sha": sha(b"z")},
            {"node": "a", "cycle": 1, "op": "fail", "path": "f/failed"},
        ]
    )[("a", 1)]
    old = {"url": "file:///objects/old", "etag": "e1", "size": 1}
    parent = {"f/old": old, "f/failed": old}
    records = {"f/old": old, "f/failed": old, "f/new": {"url": "file:///objects/n", "etag": "e2", "size": 1}}
    read = {"f/old": sha(b"o"), "f/failed": sha(b"o"), "f/new": sha(b"n")}
    assert check.check_workspace_version("v", model, read, records, parent) == []
    # without the parent, those are files nobody wrote in this cycle
    assert check.check_workspace_version("v", model, read) != []
    # a carried-over key whose record changed is the workspace's doing: checked against its model
    changed = records | {"f/old": {"url": "file:///objects/x", "etag": "e3", "size": 1}}
    assert check.check_workspace_version("v", model, read, changed, parent) != []
    # a parent's file the workspace never held may not vanish
    dropped = {k: v for k, v in records.items() if k != "f/old"}
    read_dropped = {k: v for k, v in read.items() if k != "f/old"}
    assert check.check_workspace_version("v", model, read_dropped, dropped, parent) != []
