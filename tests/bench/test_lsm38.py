"""bench/scale/lsm38_delta.py (issue 38, lsm38): the delta layout's answers equal the real
store's, before, during and after its fold.

One small catalog (3,000 records of ``scale.key_tree`` with 10 keys per directory: nested
levels) is copied twice: copy A takes five commits through the real ``Catalog``, copy B the
same change sets as deltas (blind and counted in turns). Every version of B read through
``View`` (a listing in pages, lookups, directory pages, diffs across folded and unfolded
versions) must equal A's, and so must B's ``records`` read by the real store once folded —
with a reader's snapshot and a commit in the middle of the fold."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from bench.scale import lsm38_delta as lsm
from bench.scale import scale
from bench.scale.small_commit import spread_changes
from datahub.catalog import Delete, Put, open_catalog
from datahub.catalog.model import dir_file
from datahub.errors import RecordNotFound

N = 3000


def _change_sets(live_in_d008: list[str]) -> list[list]:
    """v2..v6: spread 5 % commits at three offsets; one that empties directory ``s00/d008/``
    (deletes), makes ``s00/d950/x/`` (puts), and puts a key then deletes it; one more spread."""
    sets = [list(spread_changes(N, 0.05, base)) for base in (1, 2, 3)]
    r = scale.record(0)
    made = [Put(type(r)(f"s00/d950/x/f{i}.jpg", r.url, "e", 5)) for i in range(3)]
    twice = [Put(scale.record(N + 500)), Delete(scale.key_of(N + 500))]
    sets.append([*(Delete(k) for k in live_in_d008), *made, *twice])
    sets.append(list(spread_changes(N, 0.05, 4)))
    return sets


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[list]]:
    """(A's dir, B's catalog file, the change sets): A has v1..v6, B has v1 and no delta yet."""
    root = tmp_path_factory.mktemp("lsm38")
    mp = pytest.MonkeyPatch()
    mp.setattr(scale, "key_of", scale.key_tree)
    mp.setattr(scale, "PER_DIR", 10)
    try:
        a = root / "a"
        a.mkdir()
        catalog = open_catalog(f"sqlite:///{a / 'catalog.db'}")
        catalog.create_dataset("big")
        catalog.commit("big", (Put(scale.record(i)) for i in range(N)))
        catalog.close()
        (root / "b").mkdir()
        shutil.copyfile(a / "catalog.db", root / "b" / "catalog.db")
        catalog = open_catalog(f"sqlite:///{a / 'catalog.db'}")
        sets = _change_sets([])
        for changes in sets[:3]:
            catalog.commit("big", iter(changes))
        sets = _change_sets([r.key for r in catalog.list_records("big", prefix="s00/d008/")])
        for changes in sets[3:]:
            catalog.commit("big", iter(changes))
        catalog.close()
    finally:
        mp.undo()
    return a, root / "b" / "catalog.db", sets


def _connect(path: Path) -> sqlite3.Connection:
    return lsm.connect(path)


def _names(entries: list) -> list:
    return [e if isinstance(e, str) else tuple(e) for e in entries]


def _check(conn: sqlite3.Connection, a_dir: Path, versions: range) -> None:
    """Every read of B's ``View`` equals A's real store, for each version."""
    catalog = open_catalog(f"sqlite:///{a_dir / 'catalog.db'}")
    ds = lsm.dataset_id(conn, "big")
    try:
        for v in versions:
            view = lsm.View(conn, ds, v)
            want = list(catalog.list_records("big", v))
            got, after = [], ""
            while page := view.list_page(after, limit=700):
                got += page
                after = page[-1].key
            assert got == want, f"listing of v{v}"
            for key in [
                "s00/d008/f00001.jpg",
                "s00/d950/x/f1.jpg",
                want[0].key,
                want[len(want) // 2].key,
                want[-1].key,
            ]:
                try:
                    expected = catalog.get_record("big", v, key)
                except RecordNotFound:
                    expected = None
                assert view.get(key) == expected, f"{key} at v{v}"
            for prefix in ["", "s00/", "s00/d008/", "s00/d950/", "s02/d099/"]:
                want_dir = _names(
                    [e if isinstance(e, str) else e for e in catalog.list_directory("big", v, prefix=prefix)]
                )
                got_dir, after = [], ""
                while page := view.directory_page(prefix, after, limit=7):
                    got_dir += page
                    last = page[-1]
                    after = last if isinstance(last, str) else last[0]
                assert _names(got_dir) == want_dir, f"directory {prefix!r} of v{v}"
            for a in sorted({1, v - 2, v - 1} - {-1, 0, v}):
                assert view.diff_page(a, limit=10**6) == list(catalog.diff("big", a, v)), f"diff v{a}..v{v}"
            page = view.diff_page(1, limit=5)
            if len(page) == 5:
                assert view.diff_page(1, after=page[2].key, limit=2) == page[3:5]
    finally:
        catalog.close()


def test_deltas_read_as_the_real_store_then_fold_into_it(
    pair: tuple[Path, Path, list[list]], tmp_path: Path
) -> None:
    a_dir, b_src, sets = pair
    b = tmp_path / "catalog.db"
    shutil.copyfile(b_src, b)
    conn = _connect(b)
    real = open_catalog(f"sqlite:///{a_dir / 'catalog.db'}")
    try:
        for i, changes in enumerate(sets[:4]):
            seq, counts = lsm.commit(conn, "big", iter(changes), counted=i % 2 == 1)
            assert seq == i + 2
            if counts is not None:
                v = real.resolve("big", seq)
                assert (counts.added, counts.removed, counts.modified) == (v.added, v.removed, v.modified)
        _check(conn, a_dir, range(1, 6))
        # a reader's snapshot, taken before the fold, and a commit in the middle of it
        reader = _connect(b)
        reader.execute("BEGIN")
        before = lsm.View(reader, 1, 5).list_page(limit=N * 2)
        seen: list[int] = []

        def midway(stats: lsm.FoldStats) -> None:
            seen.append(stats.transactions)
            if stats.transactions == 2:
                writer = _connect(b)
                assert lsm.commit(writer, "big", iter(sets[4]))[0] == 6  # not blocked, not folded
                writer.close()
                assert lsm.View(reader, 1, 5).list_page(limit=N * 2) == before  # the snapshot holds
                _check(conn, a_dir, range(4, 7))  # half folded, half deltas: the same answers

        stats = lsm.fold(conn, "big", upto=5, chunk=40, after_chunk=midway)
        reader.execute("COMMIT")
        reader.close()
        assert len(seen) > 3 and stats.versions == [2, 3, 4, 5]
        _check(conn, a_dir, range(1, 7))  # v2..v5 folded, v6 a delta
        lsm.fold(conn, "big")
        assert conn.execute("SELECT count(*) FROM lsm_delta").fetchone()[0] == 0
        _check(conn, a_dir, range(1, 7))
        folded = open_catalog(f"sqlite:///{b}")
        try:
            for v in range(1, 7):
                got, want = folded.resolve("big", v), real.resolve("big", v)
                assert (got.record_count, got.total_bytes, got.added, got.removed, got.modified) == (
                    want.record_count, want.total_bytes, want.added, want.removed, want.modified,
                ), f"v{v}"  # fmt: skip
                assert list(folded.list_records("big", v)) == list(real.list_records("big", v))
                assert list(folded.diff("big", 1, v)) == list(real.diff("big", 1, v))
        finally:
            folded.close()
    finally:
        real.close()
        conn.close()


def test_a_counted_delta_commit_refuses_what_the_planner_refuses(
    pair: tuple[Path, Path, list[list]], tmp_path: Path
) -> None:
    b = tmp_path / "catalog.db"
    shutil.copyfile(pair[1], b)
    conn = _connect(b)
    try:
        with pytest.raises(RecordNotFound, match="no such key at version 1"):
            lsm.commit(conn, "big", iter([Delete("no/such.jpg")]), counted=True)
        assert lsm.commit(conn, "big", iter([Delete("no/such.jpg")]))[0] == 2  # blind: a no-op tombstone
        assert conn.execute("SELECT count(*) FROM lsm_versions").fetchone()[0] == 1
    finally:
        conn.close()


def test_dir_file_of_a_delta_row_is_the_stores() -> None:
    r = scale.record(7)
    meta = {"mtime": 12.5, "split": "x"}
    row = (r.key, r.url, r.etag, r.size, None, lsm.dump_json(meta), None)
    assert (row[0], row[1], row[2], row[3], lsm._mtime(row[5])) == dir_file(
        type(r)(r.key, r.url, r.etag, r.size, meta=meta)
    )


def test_the_bench_runs_every_step_at_small_scale(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bench.scale import lsm38

    lsm38.main(
        [
            "--records",
            "2000",
            "--dir",
            str(tmp_path),
            "--rounds",
            "1",
            "--deltas",
            "1,2",
            "--fold-chunk",
            "50",
            "--fold-pause",
            "0",
        ]
    )
    out = capsys.readouterr().out
    assert out.count("| 20 changes |") == 8  # 3 commits in turn, 5 variants
    assert (
        "reads | View, 1 deltas (v2)" in out
        and "reads | View, 2 deltas (v3)" in out
        and "fold of v2..v" in out
    )
    assert "the real store reads the folded v" in out and "before the fold: True" in out
    assert list(tmp_path.iterdir()) == []  # both copies removed


def test_fold_only_folds_the_oldest_deltas_in_turns(
    pair: tuple[Path, Path, list[list]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench.scale import lsm38

    b = tmp_path / "catalog.db"
    shutil.copyfile(pair[1], b)
    conn = lsm.connect(b)
    try:
        for changes in pair[2][:3]:
            lsm.commit(conn, "big", iter(changes))
        lsm38.main(
            [
                "--records",
                str(N),
                "--fold-only",
                str(b),
                "--fold-deltas",
                "1,1",
                "--fold-chunk",
                "40",
                "--fold-pause",
                "0",
            ]
        )
        out = capsys.readouterr().out
        assert "fold of v2..v2 (1 deltas" in out and "fold of v3..v3 (1 deltas" in out
        assert [s for (s,) in conn.execute("SELECT seq FROM lsm_versions")][:1] == [
            4
        ]  # (and any the writer made)
    finally:
        conn.close()
