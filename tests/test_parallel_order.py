"""A parallel run hands out its slow units first (tests/conftest.py, ``start_rank``).

xdist orders the units of ``--dist loadfile`` by their number of tests, so a slow file of one
test went out last and ran alone while the other worker sat idle. Checked on the suite's own
files: the units named in LONGEST_FIRST go first in that order, then every file with a test
marked ``slow``, then the rest, and within a rank xdist's own order is kept.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

from tests.conftest import LONGEST_FIRST, SLOW_MARK, _test_modules, scope_of, start_rank

TESTS = Path(__file__).resolve().parent


def _units() -> list[str]:
    files = sorted(str(p.relative_to(TESTS.parent)) for p in TESTS.rglob("test_*.py"))
    return list(OrderedDict.fromkeys(scope_of(f) for f in files))


def test_longest_first_then_slow_files_then_the_rest() -> None:
    units = _units()
    order = sorted(units, key=start_rank)
    head = [u for u in LONGEST_FIRST if u in units]
    assert order[: len(head)] == head
    slow = [u for u in units if u not in head and SLOW_MARK in (TESTS.parent / u).read_text()]
    assert "tests/cli/test_tour.py" in slow  # one slow test: it used to go out last
    assert order[len(head) : len(head) + len(slow)] == slow  # stable: xdist's order kept
    assert not any(SLOW_MARK in (TESTS.parent / u).read_text() for u in order[len(head) + len(slow) :])


def test_a_shared_package_is_ranked_by_its_files() -> None:
    assert scope_of("tests/browser/test_million.py::test_x") == "tests/browser"
    assert start_rank("tests/browser") == LONGEST_FIRST.index("tests/browser")
    assert start_rank("tests/cli/test_tour.py") < start_rank("tests/test_config.py")


def test_the_second_worker_imports_the_suites_test_modules_in_reverse() -> None:
    """What ``pytest_collection`` imports ahead on worker gw1: every test module below a
    directory argument, under its package name; file and node-id arguments are left to the
    collection."""
    root = TESTS.parent
    whole = _test_modules(root, [str(TESTS)])
    assert whole == sorted(TESTS.rglob("test_*.py"))  # every test file is inside packages
    assert [p for p in whole if p.parent == TESTS / "torch"] == _test_modules(root, [str(TESTS / "torch")])
    assert _test_modules(root, [str(TESTS / "test_config.py"), f"{TESTS}/fuse::x", "/tmp"]) == []
