"""review21c: ``datahub cache adopt-journal``'s refusals name the workspace, the journal and
what to do, as flags an operator types, without a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from datahub.cli.main import main
from datahub.writeback.adopt import adopt_journal
from tests.writeback.conftest import CHUNK
from tests.writeback.test_lognext21 import WS, Pair
from tests.writeback.test_nodeloss20 import _put


def test_a_journal_adopted_by_another_node_is_refused_naming_force(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """Node b adopted a's journal; node c's adoption of it is refused (exit 4) naming the
    workspace, both journals and ``--force`` (before: "pass force", the Python keyword, which
    the CLI does not take); with ``--force`` it adopts (exit 0)."""
    pair = Pair(tmp_path)
    try:
        journal = pair.lose_a(lambda a: _put(a, "x", b"acknowledged"))
        b = pair.open("b")
        try:
            adopt_journal(b, journal, pair.stores["b"])
            by = b.chunks.journal
        finally:
            pair.clock.now -= 700  # b's adoption and release were long ago: no fence to wait for
            b.close()
        monkeypatch.delenv("DATAHUB_CONFIG", raising=False)
        monkeypatch.setenv("DATAHUB_HOME", str(tmp_path / "c"))
        monkeypatch.setenv("DATAHUB_OBJECTS_URL", pair.config["b"].resolved_objects_url)
        monkeypatch.setenv("DATAHUB_CACHE_SHARED_URL", pair.config["b"].resolved_shared_url)
        monkeypatch.setenv("DATAHUB_CACHE_PAGE_SIZE", str(CHUNK))
        monkeypatch.setenv("DATAHUB_CATALOG_URL", f"sqlite:///{pair.catalog_path}")
        assert main(["cache", "adopt-journal", WS, journal]) == 4
        err = capsys.readouterr().err
        assert f"journal {journal} of workspace {WS!r} was adopted by journal {by}" in err
        assert "--force" in err and "Traceback" not in err
        assert main(["cache", "adopt-journal", WS, journal, "--force"]) == 0
        assert "adopted journal" in capsys.readouterr().out
    finally:
        pair.close()
