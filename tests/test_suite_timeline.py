"""make test's timeline (bench/suite/timeline.py) and its report: which unit ran where, and how
long a worker sat idle at the end while the other finished."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bench.suite.timeline_report import failure_digest, load, report, units

REPO = Path(__file__).resolve().parent.parent


def test_a_run_writes_each_test_with_its_start_end_and_cpu(tmp_path: Path) -> None:
    (tmp_path / "test_two.py").write_text(
        "import time\n\ndef test_a():\n    time.sleep(0.2)\n\ndef test_b():\n    pass\n"
    )
    timeline = tmp_path / "timeline.jsonl"
    env = {**os.environ, "DATAHUB_SUITE_TIMELINE": str(timeline), "PYTHONPATH": str(REPO),
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # fmt: skip
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "bench.suite.timeline", "test_two.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    events = load(timeline)
    assert [e["ev"] for e in events] == ["start", "collected", "begin", "test", "begin", "test", "end"]
    assert {e["w"] for e in events} == {"main"}  # no -n: the process runs the tests itself
    a, b = events[3], events[5]
    assert (a["id"], b["id"]) == ("test_two.py::test_a", "test_two.py::test_b")
    assert a["t"] - a["t0"] >= 0.2 and a["t0"] <= a["t"] <= b["t0"] <= b["t"]
    text = report(events, 5)
    assert "main: collected at" in text and ", 2 tests," in text and "idle at the end" not in text
    # the command the Makefile and docs/architecture.md show, as written
    shown = [sys.executable, "-m", "bench.suite.timeline_report", str(timeline)]
    out = subprocess.run(shown, cwd=REPO, capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.strip() == report(events, 25)  # --top 25 by default


def test_the_report_names_the_idle_worker_and_the_units_of_the_tail() -> None:
    def test(w: str, nodeid: str, t0: float, t1: float) -> dict:
        return {"w": w, "ev": "test", "id": nodeid, "t0": t0, "t": t1, "cpu": 0.5}

    events = [
        {"w": "controller", "ev": "start", "t": 100.0},
        {"w": "gw0", "ev": "collected", "t": 110.0, "n": 4, "cpu": 9.0},
        {"w": "gw1", "ev": "collected", "t": 111.0, "n": 4, "cpu": 9.5},
        test("gw0", "tests/a/test_x.py::t1", 110.0, 150.0),
        test("gw1", "tests/b/test_y.py::t1", 111.0, 120.0),
        test("gw1", "tests/b/test_y.py::t2", 120.0, 125.0),
        test("gw1", "tests/browser/test_p.py::t", 125.0, 130.0),  # a SHARED_PACKAGES unit
    ]
    got = units(events)
    assert got["tests/b/test_y.py"] == {"w": "gw1", "t0": 111.0, "t1": 125.0, "sum": 14.0, "cpu": 1.0, "n": 2}
    assert "tests/browser" in got
    text = report(events, 5)
    assert "gw0: idle at the end 0.0 s" in text and "gw1: idle at the end 20.0 s" in text
    assert text.index("tests/a/test_x.py") < text.index("tests/b/test_y.py")  # longest first
    assert json.dumps(got)  # plain data: printable, comparable between runs


def test_a_failed_runs_digest_names_the_test_an_internal_error_ended(tmp_path: Path) -> None:
    """An exception out of a reporting hook ends pytest's session with the test unfinished (in an
    xdist worker the controller then says only ``assert not crashitem``): the digest make test
    prints after a failed pass names that test and the error's last lines."""
    (tmp_path / "conftest.py").write_text(
        "def pytest_runtest_logreport(report):\n"
        "    if report.when == 'call' and 'breaks' in report.nodeid:\n"
        "        raise RuntimeError('a hook broke after the call')\n"
    )
    (tmp_path / "test_three.py").write_text(
        "def test_ok():\n    pass\n\ndef test_breaks():\n    pass\n\ndef test_after():\n    pass\n"
    )
    timeline = tmp_path / "timeline.jsonl"
    env = {**os.environ, "DATAHUB_SUITE_TIMELINE": str(timeline), "PYTHONPATH": str(REPO),
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # fmt: skip
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "bench.suite.timeline", "test_three.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 3, res.stdout + res.stderr  # pytest's INTERNAL_ERROR
    digest = failure_digest(load(timeline))
    assert "began at" in digest and "never ended: test_three.py::test_breaks" in digest
    assert "test_ok" not in digest and "test_after" not in digest  # it ended; it never began
    assert "internal error at" in digest and "RuntimeError: a hook broke after the call" in digest
    # the command the Makefile runs after a failed pass, as written
    shown = [sys.executable, "-m", "bench.suite.timeline_report", "--failure", str(timeline)]
    out = subprocess.run(shown, cwd=REPO, capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.strip() == digest
    missing = [sys.executable, "-m", "bench.suite.timeline_report", "--failure", str(tmp_path / "none.jsonl")]
    assert (
        subprocess.run(missing, cwd=REPO, capture_output=True, text=True, timeout=60, check=True).stdout == ""
    )
