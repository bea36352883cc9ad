"""Claims of the docs about the tests that check them (claims22).

docs/semantics.md names, in brackets, the test that checks each claim, and says where those
tests live: a bracket naming a test that is not there (renamed, moved, deleted) is a claim
nothing checks. Before claims22 it said every one was in tests/fuse/, and eight were not.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _defined_tests() -> dict[str, list[str]]:
    """test function name -> the test directories defining it."""
    found: dict[str, list[str]] = {}
    for path in (REPO / "tests").rglob("test_*.py"):
        for name in re.findall(r"^(?:async )?def (test_\w+)\(", path.read_text(), re.M):
            found.setdefault(name, []).append(str(path.parent.relative_to(REPO)))
    return found


def test_every_test_docs_semantics_names_exists_where_the_doc_says() -> None:
    text = (REPO / "docs/semantics.md").read_text()
    intro = text.split("\n\n", 2)[1]
    places = set(re.findall(r"`(tests(?:/\w+)*)/?`", intro))
    named = {n for b in re.findall(r"\[([^\]]*test_[^\]]*)\]", text) for n in re.findall(r"test_\w+", b)}
    assert len(named) > 30 and "tests/fuse" in places, (named, places)
    defined = _defined_tests()
    wrong = [
        f"[{name}]: defined in {defined.get(name) or 'no test file'}, the intro names {sorted(places)}"
        for name in sorted(named)
        if not set(defined.get(name, [])) & places
    ]
    assert not wrong, "\n".join(wrong)
