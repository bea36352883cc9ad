"""Shared fixtures: real S3 servers (moto, Ceph RGW) and a clean datahub Config per test.

Per-component fixtures live in the component's own ``tests/<component>/conftest.py``.

Parallel runs (``make test``: pytest-xdist, two workers, docs/architecture.md "Running the
suite in parallel"): each test file goes to one worker whole, so module fixtures are set up once
as in a serial run; a directory in ``SHARED_PACKAGES`` goes to one worker whole (its package
fixture, e.g. one Chromium, is built once). Tests marked ``exclusive`` change or measure
state the whole machine shares; a worker skips them and ``make test`` runs them afterwards,
alone, in a serial pass (the ids its parallel pass listed with ``--exclusive-list``).
"""

from __future__ import annotations

import fcntl
import importlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from datahub.config import Config, load_config
from tests.servers import CephCluster, MotoServer, S3Endpoint, stop_ceph

# Hypothesis' default deadline (200 ms an example) measures the machine, not the code: on the
# shared 2 cores a worker stalled for 250 ms (load 10-20, a gen-2 collection) failed a
# microsecond example with "Unreliable test timings" (FlakyFailure), the whole suite with it.
# Tests check behaviour, never timing; a test that means a time bound asks for it itself.
settings.register_profile("datahub", deadline=None)
settings.load_profile("datahub")

# directories whose package-scoped fixture is worth building once: all their files on one worker
SHARED_PACKAGES = ("browser", "multihost")
# files there that do not use it: free to go to the other worker
APART = ("tests/multihost/test_soak.py",)  # builds its own cluster (bench/soak)
# The longest units of a parallel run (make test's --durations), handed out first: xdist's
# default order (most tests first) left the one-test 140 s soak and the cluster package to
# the end, where one worker ran them alone while the other sat idle.
LONGEST_FIRST = (
    "tests/multihost/test_soak.py",
    "tests/multihost",
    "tests/browser",
    "tests/fuse/test_bucket_by_directory.py",
    "tests/api/test_schema_fuzz.py",
    "tests/catalog/test_http_store.py",
    "tests/fuse/test_bucket_warmup.py",
    "tests/labelx/test_schema_fuzz.py",
)
EXCLUSIVE_SKIP = (
    "exclusive: changes or measures machine-wide state, so it runs alone: "
    "make test runs it after the parallel pass, alone (pytest -m exclusive, without -n)"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--exclusive-list",
        metavar="PATH",
        help="write the node ids of the collected tests marked exclusive to PATH, one a line "
        "(make test's parallel pass; its serial pass runs them: pytest @PATH)",
    )


@pytest.hookimpl(tryfirst=True)  # before -m deselects them
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    exclusive = [item for item in items if item.get_closest_marker("exclusive") is not None]
    listing = config.getoption("exclusive_list")
    if listing:  # every worker collects the same tests: each writes the same file, whole
        path = Path(listing)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}")
        tmp.write_text("".join(f"{item.nodeid}\n" for item in exclusive))
        tmp.replace(path)
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: never beside another test
        for item in exclusive:
            item.add_marker(pytest.mark.skip(reason=EXCLUSIVE_SKIP))


def pytest_collection(session: pytest.Session) -> None:
    """Every xdist worker but the first imports the test modules ahead of its collection, each
    starting at another place (``ahead_order``).

    Why: on a fresh checkout (CI, a fresh clone) the workers collect the whole suite at the
    same time, and pytest rewrites each test module's asserts (parse, rewrite, compile) before
    it writes it to ``__pycache__``: about half of a worker's collection CPU. In the same order
    every worker rewrites every module; in different orders each reads from ``__pycache__`` the
    modules another has already rewritten. The items, their order and what a module runs at
    import are unchanged: the collection then finds every module already imported. A module
    that fails to import here is left to the collection, which reports it as usual."""
    workerinput = getattr(session.config, "workerinput", None)
    if workerinput is None:
        return
    root = Path(__file__).resolve().parent.parent
    here = session.config.invocation_params.dir
    modules = _test_modules(root, [str(here / arg) for arg in session.config.args])
    index = int(workerinput["workerid"].removeprefix("gw"))
    for path in ahead_order(modules, index, int(workerinput.get("workercount", 2))):
        name = ".".join(path.relative_to(root).with_suffix("").parts)
        try:
            importlib.import_module(name)
        except BaseException as exc:  # the collection imports it again and reports why (a skip too)
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                raise


def ahead_order(modules: list[Path], index: int, count: int) -> list[Path]:
    """The modules worker ``index`` of ``count`` imports ahead of its collection: none for the
    first (its collection goes front to back), the others back to front, each from its own
    place: the second from the end, the third of three from the middle. So on two workers the
    two meet in the middle, and on three every stretch is rewritten by one worker while the
    others read it."""
    if index == 0 or not modules:
        return []
    backwards = modules[::-1]
    start = (index - 1) * len(backwards) // max(count - 1, 1)
    return backwards[start:] + backwards[:start]


def _test_modules(root: Path, args: list[str]) -> list[Path]:
    """The test files below the directories among ``args`` (absolute: a run of the whole suite
    or of directories; files and node ids are imported by the collection alone), each inside
    packages from ``root`` down, so it imports under the name the collection gives it."""
    found: list[Path] = []
    for arg in args:
        top = Path(arg).resolve()
        if "::" in arg or not top.is_dir() or not top.is_relative_to(root):
            continue
        for path in sorted(top.rglob("test_*.py")):
            if all(
                (d / "__init__.py").is_file() for d in path.parents if d != root and d.is_relative_to(root)
            ):
                found.append(path)
    return found


OLD_TREES = pytest.StashKey[threading.Thread]()  # the controller's thread deleting old trees


def pytest_sessionstart(session: pytest.Session) -> None:
    """A parallel run's controller deletes the temp trees of old sessions in the background.

    Why: pytest deletes the numbered trees (``/tmp/pytest-of-<user>/pytest-N``) older than the
    last ``tmp_path_retention_count`` sessions at a session's *exit*, serially, one unlink per
    file (~1 ms each on this machine's ext4, mounted ``discard``). ``make test``'s exclusive
    pass was the session that deleted the previous run's whole parallel tree, after its four
    tests, on an otherwise idle machine. The controller of a parallel run only waits for its
    workers, so it deletes the same trees (pytest's own rule and function, the same sessions)
    at its start instead, beside the tests, at the lowest CPU priority; its exit joins it
    before pytest's own clean-up, which then finds nothing left to do."""
    config = session.config
    if not config.pluginmanager.has_plugin("dsession"):  # not a pytest-xdist controller
        return
    factory = config._tmp_path_factory
    if factory._given_basetemp is not None:  # --basetemp: pytest deletes only that, at start
        return
    from _pytest.pathlib import LOCK_TIMEOUT, cleanup_numbered_dir

    basetemp = factory.getbasetemp()  # the controller makes it for its workers anyway
    keep = factory._retention_count if factory._retention_policy != "none" else 0
    dead_before = basetemp.stat().st_mtime - LOCK_TIMEOUT  # what pytest's exit would use

    def clean() -> None:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)  # this thread only
        cleanup_numbered_dir(basetemp.parent, "pytest-", keep, dead_before)

    thread = threading.Thread(target=clean, name="old pytest trees", daemon=True)
    thread.start()
    config.stash[OLD_TREES] = thread


@pytest.hookimpl(tryfirst=True)  # before pytest's own tmpdir clean-up at session finish
def pytest_sessionfinish(session: pytest.Session) -> None:
    thread = session.config.stash.get(OLD_TREES, None)
    if thread is not None:
        thread.join()  # never leave a half-deleted tree locked behind (pytest's lock lasts 3 days)
    if session.config.pluginmanager.has_plugin("dsession"):  # a parallel run's controller, workers done
        pointer = session.config._tmp_path_factory.getbasetemp() / CEPH_OF_THE_RUN
        if pointer.exists():
            stop_ceph(Path(pointer.read_text()).parent)


def scope_of(nodeid: str) -> str:
    """The unit a parallel run hands to one worker whole: the test's file, or its directory
    when that is one of SHARED_PACKAGES."""
    path = nodeid.split("::", 1)[0]
    parts = path.split("/")
    if len(parts) > 2 and parts[0] == "tests" and parts[1] in SHARED_PACKAGES and path not in APART:
        return "/".join(parts[:2])
    return path


def start_rank(scope: str) -> int:
    """Where a unit goes in a parallel run's queue: LONGEST_FIRST in its order, then the files
    with a test marked ``slow``, then the rest (xdist's order: most tests first).

    Why: xdist hands out the units with the most tests first, so a slow file of one or two
    tests (the tour, a fixture of thousands of objects) went out last and ran alone while the
    other worker sat idle; handed out early, it runs beside the many short files instead."""
    if scope in LONGEST_FIRST:
        return LONGEST_FIRST.index(scope)
    return len(LONGEST_FIRST) + (0 if _marks_slow(scope) else 1)


def _marks_slow(scope: str) -> bool:
    """Whether the unit's file (or a file of the unit's directory) marks a test ``slow``; read
    from the source, since xdist's controller schedules by node id and never collects."""
    path = Path(__file__).parent.parent / scope
    files = sorted(path.glob("test_*.py")) if path.is_dir() else [path]
    return any(SLOW_MARK in f.read_text(errors="replace") for f in files if f.is_file())


SLOW_MARK = "pytest.mark.slow"


@pytest.hookimpl(optionalhook=True)  # a plain pytest without xdist installed still runs
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``--dist loadfile`` (make test) with SHARED_PACKAGES kept whole; other modes as xdist has them."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FileOrPackage(LoadFileScheduling):
        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

        def _assign_work_unit(self, node: object) -> None:
            if not self.ordered:  # the first assignment: the longest units go out first
                for scope in sorted(self.workqueue, key=start_rank):  # stable: xdist's order within a rank
                    self.workqueue.move_to_end(scope)
                self.ordered = True
            super()._assign_work_unit(node)

    return FileOrPackage(config, log)


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[S3Endpoint]:
    server = MotoServer()
    try:
        yield server.endpoint
    finally:
        server.stop()


@pytest.fixture(scope="session")
def ceph_cluster(
    pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CephCluster]:
    """The real Ceph (mon, OSD, RGW); in a parallel run, one for all its workers.

    Why one: each xdist worker started its own (3 CPU-s and 12 s of that worker at load 9,
    then its daemons' idle CPU and memory to the end), though every test makes its own
    buckets, pool prefixes and keys. The first worker that needs it starts it, under a lock
    in the run's temp root where it writes the cluster's env.sh; the others reuse it; the
    controller stops it once every worker is done (``pytest_sessionfinish``)."""
    if not hasattr(pytestconfig, "workerinput"):
        cluster = CephCluster()
        try:
            yield cluster
        finally:
            cluster.stop()
        return
    yield _ceph_of_the_run(tmp_path_factory.getbasetemp().parent)  # a worker's: <controller's>/popen-gwN


CEPH_OF_THE_RUN = "ceph-env.txt"  # in a parallel run's temp root: the env.sh of its one Ceph


def _ceph_of_the_run(run_root: Path) -> CephCluster:
    with open(run_root / "ceph.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the other workers wait while the first starts it
        pointer = run_root / CEPH_OF_THE_RUN
        if pointer.exists():
            return CephCluster(reuse=Path(pointer.read_text()))
        cluster = CephCluster()
        if cluster.owned:  # not a DATAHUB_TEST_CEPH_ENV cluster: the controller stops it
            pointer.write_text(str(cluster.dir / "env.sh"))
        return cluster


@pytest.fixture(scope="session")
def ceph_endpoint(ceph_cluster: CephCluster) -> S3Endpoint:
    return ceph_cluster.endpoint


@pytest.fixture(params=["moto", pytest.param("ceph", marks=pytest.mark.ceph)])
def s3_endpoint(request: pytest.FixtureRequest) -> S3Endpoint:
    """Runs a test once against moto and once against the real Ceph RGW."""
    return request.getfixturevalue(f"{request.param}_endpoint")


@pytest.fixture
def config(tmp_path: Path) -> Config:
    """An embedded-default Config rooted in a fresh temp dir (no env or file leaks in)."""
    return load_config(env={}, overrides={"home": str(tmp_path / "var")})
