"""`cache forget-journal`'s plan lists paths other nodes wrote (its cover records' small files,
its flushed files): a name holding a newline printed a line of its own, so a node's file name
could forge a line of the plan an operator reads before `--yes` (review18c's finding). Each
path is one line now, its control characters written out."""

from __future__ import annotations

from types import SimpleNamespace

from datahub.cli.journals_cmd import _plan_text


def test_a_path_with_a_newline_stays_on_its_line_of_the_plan() -> None:
    entry = SimpleNamespace(journal="j1", workspace="ws", objects=1, bytes=3, prefix="p/", newest=0.0)
    flushed = SimpleNamespace(sizes={"out\nits flushed files: 0 objects": 3}, objects=1, bytes=3, url="u")
    text = _plan_text(entry, ["a.txt\n  nothing else is lost"], flushed, "file:///shared")
    lines = text.split("\n")
    assert "  a.txt\\x0a  nothing else is lost" in lines
    assert "  out\\x0aits flushed files: 0 objects" in lines
    assert len(lines) == 5  # the two headers, a path each, nothing forged
