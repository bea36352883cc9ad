"""A parallel run hands out its slow units first (tests/conftest.py, ``start_rank``).

xdist orders the units of ``--dist loadfile`` by their number of tests, so a slow file of one
test went out last and ran alone while the other worker sat idle. Checked on the suite's own
files: the units named in LONGEST_FIRST go first in that order, then every file with a test
marked ``slow``, then the rest, and within a rank xdist's own order is kept.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

from tests.conftest import LONGEST_FIRST, SLOW_MARK, _test_modules, ahead_order, scope_of, start_rank

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


def test_the_workers_after_the_first_import_the_modules_ahead_from_their_own_places() -> None:
    """Worker gw0 imports nothing ahead (its collection goes front to back); on two workers gw1
    imports from the back; on three gw1 from the back and gw2 from the middle, backwards, and
    each imports every module once."""
    mods = [Path(f"m{i}") for i in range(10)]
    assert ahead_order(mods, 0, 3) == [] and ahead_order([], 1, 2) == []
    assert ahead_order(mods, 1, 2) == mods[::-1]
    assert ahead_order(mods, 1, 3) == mods[::-1]
    gw2 = ahead_order(mods, 2, 3)
    assert gw2[0] == Path("m4") and sorted(gw2) == sorted(mods)
    assert gw2 == [Path(f"m{i}") for i in (4, 3, 2, 1, 0, 9, 8, 7, 6, 5)]


def test_the_second_worker_imports_the_suites_test_modules_in_reverse() -> None:
    """What ``pytest_collection`` imports ahead on a worker after gw0: every test module below a
    directory argument, under its package name; file and node-id arguments are left to the
    collection."""
    root = TESTS.parent
    whole = _test_modules(root, [str(TESTS)])
    assert whole == sorted(TESTS.rglob("test_*.py"))  # every test file is inside packages
    assert [p for p in whole if p.parent == TESTS / "torch"] == _test_modules(root, [str(TESTS / "torch")])
    assert _test_modules(root, [str(TESTS / "test_config.py"), f"{TESTS}/fuse::x", "/tmp"]) == []
