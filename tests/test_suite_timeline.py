"""make test's timeline (bench/suite/timeline.py) and its report: which unit ran where, and how
long a worker sat idle at the end while the other finished."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.suite.timeline import cgroup_usage_file
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
    # both times are written to the millisecond: their float difference can fall a hair under the
    # 0.2 s the test slept (.873 - .673 = .19999980...), the difference in milliseconds cannot
    assert round(a["t"] - a["t0"], 3) >= 0.2 and a["t0"] <= a["t"] <= b["t0"] <= b["t"]
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


CPUACCT = Path("/sys/fs/cgroup/cpuacct")


@pytest.mark.skipif(
    not (CPUACCT / "cgroup.procs").exists() or not os.access(CPUACCT, os.W_OK),
    reason="needs a writable cgroup v1 cpuacct hierarchy (root)",
)
def test_a_run_in_a_cgroup_of_its_own_counts_a_detached_processs_cpu_as_tree(tmp_path: Path) -> None:
    """A mount daemon started ``--background`` is re-parented away from pytest: the worker never
    waits for it, so its CPU is not in a test's ``cpu``. Run in a cpuacct cgroup of its own,
    each test line also has ``tree``, the cgroup's CPU over the test, which counts it; the
    report shows the tree column. Outside such a cgroup the lines have no ``tree``."""
    (tmp_path / "test_detached.py").write_text(
        "import os, time\n"
        "from pathlib import Path\n\n"
        "def test_detached(tmp_path):\n"
        "    out = Path(os.environ['DETACHED_OUT'])\n"
        "    if os.fork() == 0:  # a double fork: the grandchild is nobody's child here\n"
        "        if os.fork() == 0:\n"
        "            t = time.process_time()\n"
        "            while time.process_time() - t < 0.3:\n"
        "                pass\n"
        "            out.with_suffix('.tmp').write_text(str(time.process_time()))\n"
        "            os.rename(out.with_suffix('.tmp'), out)\n"
        "        os._exit(0)\n"
        "    while not out.exists():\n"
        "        time.sleep(0.05)\n"
        "\n"
        "def test_quiet():\n"
        "    pass\n"
    )
    cgroup = CPUACCT / f"datahub-timeline-test-{os.getpid()}"
    cgroup.mkdir()
    timeline = tmp_path / "timeline.jsonl"
    env = {**os.environ, "DATAHUB_SUITE_TIMELINE": str(timeline), "PYTHONPATH": str(REPO),
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "DETACHED_OUT": str(tmp_path / "spent")}  # fmt: skip

    def into_cgroup() -> None:
        (cgroup / "cgroup.procs").write_text(str(os.getpid()))

    try:
        res = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "bench.suite.timeline", "test_detached.py"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, preexec_fn=into_cgroup,
        )  # fmt: skip
        assert res.returncode == 0, res.stdout + res.stderr
    finally:
        for _ in range(100):  # the grandchild may still be exiting
            try:
                cgroup.rmdir()
                break
            except OSError:
                time.sleep(0.1)
    spent = float((tmp_path / "spent").read_text())  # the detached process's own CPU seconds
    detached, quiet = [e for e in load(timeline) if e["ev"] == "test"]
    assert detached["tree"] >= spent >= 0.3
    assert detached["cpu"] < spent  # never waited for: not in the worker's own figure
    assert 0 <= quiet["tree"] < spent
    assert "tree CPU-s" in report(load(timeline), 5)
    if cgroup_usage_file() is not None:  # this run is in a cgroup of its own: so is the next
        return
    # the same file outside a cgroup of its own: no tree field, no tree column
    plain = tmp_path / "plain.jsonl"
    (tmp_path / "spent").unlink()
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "bench.suite.timeline", "test_detached.py::test_quiet"],
        cwd=tmp_path, env={**env, "DATAHUB_SUITE_TIMELINE": str(plain)}, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert [e for e in load(plain) if e["ev"] == "test" and "tree" in e] == []
    assert "tree CPU-s" not in report(load(plain), 5)
