"""blobcas19: a `cache forget-journal` run given the wrong flush target (review19a's finding).

The first run deleted the journal's shared-tier prefix and nothing of its flushed folder
(it looked under the wrong target); the prefix is the only proof that a folder of that
journal id is the workspace's (review18c), so every run with the right target was refused
("nothing under prefix") and the flushed files leaked. Now the first run leaves a marker
under the prefix, and the rerun with the right target deletes the folder and then the marker.
Two nodes over one catalog and one local shared tier (``tests/cli/test_journals17.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from datahub.writeback import default_target
from datahub.writeback.journals import journal_objects, journal_prefix
from tests.cli.test_journals17 import WS, Cluster, run
from tests.writeback.conftest import write


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    c = Cluster(tmp_path, monkeypatch)
    yield c
    c.close()


def _flushed_by_b(cluster: Cluster) -> str:
    """Node b writes and flushes three files, then dies; its journal id."""
    ws = cluster.open("b")
    for i in range(3):
        write(ws, f"out-{i}.txt", f"node b flushed {i}".encode())
    ws.flush()
    journal = ws.chunks.journal
    ws.abandon()
    return journal


def _target(cluster: Cluster) -> str:
    """Where node b flushed: its default target, under its own objects_url (node a's, the
    operator's default, is another)."""
    return default_target(cluster.nodes["b"][0], WS)


def _flushed_files(cluster: Cluster, journal: str) -> int:
    return journal_objects(cluster.nodes["a"][1], _target(cluster), WS, journal).objects


def _forgotten(cluster: Cluster, journal: str) -> bool:
    config, stores = cluster.nodes["a"]
    return journal_prefix(config, stores.shared_store(cluster.shared_url), WS, journal).forgotten


def test_a_rerun_with_the_right_target_deletes_what_a_wrong_target_left(
    cluster: Cluster, capsys: pytest.CaptureFixture
) -> None:
    b = _flushed_by_b(cluster)
    assert _flushed_files(cluster, b) == 3 and cluster.objects(b) > 0
    assert _target(cluster) != default_target(cluster.nodes["a"][0], WS)
    code, out, err = run(capsys, "cache", "forget-journal", WS, b, "--yes")  # node a's default target
    assert code == 0, err
    assert "marker" in out and "stays" in out
    assert cluster.objects(b) == 0 and _forgotten(cluster, b)  # the prefix is its marker alone
    assert _flushed_files(cluster, b) == 3  # nothing of the real folder went
    code, out, err = run(capsys, "cache", "forget-journal", WS, b, "--yes", "--target", _target(cluster))
    # before: exit 3 ("nothing under writeback/run-42/j-…/"), and b's flushed files leaked
    assert code == 0, err
    assert _flushed_files(cluster, b) == 0 and not _forgotten(cluster, b)
    code, _, err = run(capsys, "cache", "forget-journal", WS, b, "--yes", "--target", _target(cluster))
    assert code == 3 and "already forgotten, or a wrong id" in err


def test_only_the_marker_left_and_nothing_under_the_target_is_refused_until_told(
    cluster: Cluster, capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    b = _flushed_by_b(cluster)
    wrong = (tmp_path / "not-its-target").as_uri()
    assert run(capsys, "cache", "forget-journal", WS, b, "--yes", "--target", wrong)[0] == 0
    code, _, err = run(capsys, "cache", "forget-journal", WS, b, "--yes", "--target", wrong)
    assert code == 3 and "--drop-marker" in err and _forgotten(cluster, b)  # a repeat deletes nothing
    code, _, err = run(capsys, "cache", "forget-journal", WS, b, "--yes", "--target", wrong, "--drop-marker")
    assert code == 0, err
    assert not _forgotten(cluster, b) and _flushed_files(cluster, b) == 3  # as the operator said
