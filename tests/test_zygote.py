"""The test harness's zygote (tests/zygote.py): a ``python -m`` child forked from a pre-imported
interpreter behaves as the fresh interpreter ``subprocess.Popen`` starts, as the tests see it.

Each behaviour is checked on both paths (``zygote``, and ``plain``: ``DATAHUB_TEST_ZYGOTE=0``)
with the same expectations: exit codes, a signal's death as ``-N``, the environment, working
directory and argv honoured, ``/proc/PID/cmdline`` (what ``is_mount_daemon`` reads), no
descriptor leaked beyond 0-2, a crash reported, ``run``'s capture and timeout.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from fuse_adapter.daemon import is_mount_daemon
from tests import zygote
from tests.zygote import ZygoteProcess

CHILD = "tests.zygote_child"
WAIT = 60.0


@pytest.fixture(params=["zygote", "plain"])
def kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(zygote.ENV_SWITCH, "1" if request.param == "zygote" else "0")
    if request.param == "plain":
        # a fresh interpreter whose working directory is not the checkout finds ``tests`` (the
        # child's package) only on PYTHONPATH; the zygote's children have the checkout on their
        # path already (and a PYTHONPATH unlike the zygote's would send them down this path)
        path = [str(zygote.REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(path))
    return request.param


_started: list[ZygoteProcess | subprocess.Popen] = []


@pytest.fixture(autouse=True)
def _no_child_left() -> Iterator[None]:
    """Every child a test started is gone after it, even when the test failed midway."""
    yield
    while _started:
        proc = _started.pop()
        if proc.poll() is None:
            proc.kill()
            proc.wait(WAIT)


def start(
    kind: str, tmp_path: Path, *args: str, cwd: Path | None = None, pass_fd: int | None = None
) -> ZygoteProcess | subprocess.Popen:
    """``python -m tests.zygote_child ARGS`` with stdout and stderr to ``tmp_path/out``."""
    cmd = [sys.executable, "-m", CHILD, *args]
    with open(tmp_path / "out", "ab") as out:
        proc = zygote.popen(
            cmd, stdout=out.fileno(), stderr=out.fileno(), cwd=cwd or zygote.REPO, pass_fd=pass_fd
        )
    _started.append(proc)
    expected = ZygoteProcess if kind == "zygote" else subprocess.Popen
    assert isinstance(proc, expected)
    if zygote.PASSED_FD not in args:
        assert proc.args == cmd
    return proc


def output(tmp_path: Path) -> str:
    path = tmp_path / "out"
    return path.read_text() if path.exists() else ""


def wait_ready(proc: ZygoteProcess | subprocess.Popen, tmp_path: Path) -> None:
    deadline = time.monotonic() + WAIT
    while "ready" not in output(tmp_path):
        assert proc.poll() is None, output(tmp_path)
        assert time.monotonic() < deadline, "the child never said ready"
        time.sleep(0.02)


def fresh_signals() -> dict[str, str]:
    """The dispositions a fresh interpreter started from this process has (SIGINT is ignored
    in one started from a background job: CPython keeps an inherited SIG_IGN)."""
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"fresh-{uuid.uuid4()}.json"
    try:
        with open(os.devnull, "wb") as null:
            cmd = [sys.executable, "-m", CHILD, "report", str(path)]
            subprocess.run(cmd, stdout=null, stderr=null, cwd=zygote.REPO, check=True, timeout=WAIT)
        return json.loads(path.read_text())["signals"]
    finally:
        path.unlink(missing_ok=True)


@contextlib.contextmanager
def disposition(sig: int, handler: object) -> Iterator[None]:
    """``sig``'s disposition in this process set to ``handler`` for the block."""
    before = signal.signal(sig, handler)
    try:
        yield
    finally:
        signal.signal(sig, before)


def report(kind: str, tmp_path: Path, cwd: Path, *extra: str) -> dict:
    path = tmp_path / "report.json"
    proc = start(kind, tmp_path, "report", str(path), *extra, cwd=cwd)
    assert proc.wait(WAIT) == 0, output(tmp_path)
    return json.loads(path.read_text())


@pytest.mark.parametrize(
    ("args", "code", "said"),
    [
        (("exit", "0"), 0, ""),
        (("exit", "3"), 3, ""),
        (("message", "no such dataset"), 1, "no such dataset"),
        (("raise",), 1, "RuntimeError: the child's own failure"),
        (("abort",), -signal.SIGABRT, ""),
    ],
)
def test_exit_codes_and_a_crash_are_reported(
    kind: str, tmp_path: Path, args: tuple, code: int, said: str
) -> None:
    proc = start(kind, tmp_path, *args)
    assert proc.wait(WAIT) == code
    assert proc.returncode == code and proc.poll() == code
    assert said in output(tmp_path)
    if args[0] == "raise":
        assert "Traceback (most recent call last)" in output(tmp_path)


@pytest.mark.parametrize(
    ("how", "code"),
    [
        ("kill", -signal.SIGKILL),
        ("kill -9 from outside", -signal.SIGKILL),
        ("terminate", -signal.SIGTERM),
        ("SIGINT", -signal.SIGINT),
    ],
)
def test_a_signal_death_is_seen_as_minus_the_signal(kind: str, tmp_path: Path, how: str, code: int) -> None:
    with disposition(signal.SIGINT, signal.default_int_handler):  # not ignored, even in a background job
        proc = start(kind, tmp_path, "sleep")
    wait_ready(proc, tmp_path)
    assert proc.poll() is None and proc.returncode is None
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.05)
    if how == "kill":
        proc.kill()
    elif how == "terminate":
        proc.terminate()
    elif how == "SIGINT":
        proc.send_signal(signal.SIGINT)
    else:
        os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(WAIT) == code
    if how == "SIGINT":  # KeyboardInterrupt, then death by the signal, as python does
        assert "KeyboardInterrupt" in output(tmp_path)
    proc.kill()  # after the exit: nothing, as Popen does
    assert proc.returncode == code


def test_environment_cwd_argv_signals_and_descriptors_are_a_fresh_interpreters(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZYGOTE_PROBE", "set by the test")
    monkeypatch.delenv("HOME", raising=False)
    workdir = tmp_path / "work dir"
    workdir.mkdir()
    path = str(tmp_path / "report.json")
    inherited = os.open(os.devnull, os.O_RDONLY)
    os.set_inheritable(inherited, True)  # not passed: Popen closes it, the zygote never had it
    try:
        got = report(kind, tmp_path, workdir, "an arg")
    finally:
        os.close(inherited)
    assert got["env"] == zygote._process_env()  # what a Popen hands down: the C environ
    assert got["cwd"] == str(workdir) and got["path0"] == str(workdir)
    assert got["argv"] == [str(zygote.REPO / "tests" / "zygote_child.py"), "report", path, "an arg"]
    assert got["cmdline"] == [sys.executable, "-m", CHILD, "report", path, "an arg"]
    assert got["fds"] == []
    assert got["signals"] == fresh_signals()
    assert got["preloaded"] == (kind == "zygote")  # the fork is what was measured, not a fresh start


def test_popen_with_an_environment_gives_the_child_that_one_whole(kind: str, tmp_path: Path) -> None:
    """``popen(env=...)`` as ``subprocess.Popen``'s (the CSI plugin's own environment,
    tests/csi/conftest.py): the child sees exactly that environment, not this process's."""
    env = {k: v for k, v in zygote._process_env().items() if k != "HOME"}
    env["ZYGOTE_TEST_VAR"] = "given"
    path = tmp_path / "report.json"
    cmd = [sys.executable, "-m", CHILD, "report", str(path)]
    with open(tmp_path / "out", "ab") as out:
        proc = zygote.popen(cmd, stdout=out.fileno(), stderr=out.fileno(), cwd=tmp_path, env=env)
    _started.append(proc)
    assert isinstance(proc, ZygoteProcess if kind == "zygote" else subprocess.Popen)
    assert proc.wait(WAIT) == 0, output(tmp_path)
    assert json.loads(path.read_text())["env"] == env
    assert "ZYGOTE_TEST_VAR" not in os.environ


def test_a_passed_descriptor_is_the_childs_under_the_number_its_argv_names(kind: str, tmp_path: Path) -> None:
    """``popen(pass_fd=W)``: the child has W under the number ``PASSED_FD`` became in its argv
    (a mount daemon's ``--ready-fd``: tests/fuse/conftest.py waits on that pipe), and no other
    descriptor above 2; the pipe ends when it exits."""
    read_end, write_end = os.pipe()
    try:
        proc = start(kind, tmp_path, "write", zygote.PASSED_FD, "said", pass_fd=write_end)
        os.close(write_end)
        write_end = -1
        assert os.read(read_end, 16) == b"said"
        assert proc.wait(WAIT) == 0, output(tmp_path)
        assert os.read(read_end, 16) == b""  # every copy of the write end closed
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)
    number = proc.args[proc.args.index("write") + 1]
    assert number != zygote.PASSED_FD and int(number) > 2
    assert json.loads(output(tmp_path)) == []  # the passed one closed by the child: none left


def test_an_ignored_signal_and_the_blocked_mask_are_inherited_as_through_exec(
    kind: str, tmp_path: Path
) -> None:
    with disposition(signal.SIGTERM, signal.SIG_IGN), disposition(signal.SIGINT, signal.default_int_handler):
        got = report(kind, tmp_path, tmp_path)
    assert got["signals"]["SIGTERM"] == "ignore"
    assert got["signals"]["SIGINT"] == "KeyboardInterrupt"  # a handler is reset by exec, then CPython's
    with disposition(signal.SIGINT, signal.SIG_IGN):
        assert report(kind, tmp_path, tmp_path)["signals"]["SIGINT"] == "ignore"


def _cmdline(pid: int) -> bytes | str:
    """What ``is_mount_daemon`` read, for a failure's message (it failed once in a loaded run)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError as exc:
        return repr(exc)


def test_the_rewritten_cmdline_names_the_mount_daemon(kind: str, tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    absolute = start(kind, tmp_path, "sleep", "mount", str(mnt), "--foreground")
    relative = start(kind, tmp_path, "sleep", "mount", "mnt", "--foreground", cwd=tmp_path)
    try:
        for proc in (absolute, relative):
            assert is_mount_daemon(proc.pid, str(mnt)), (proc.poll(), _cmdline(proc.pid), output(tmp_path))
            assert not is_mount_daemon(proc.pid, str(tmp_path / "other"))
    finally:
        for proc in (absolute, relative):
            proc.kill()
            proc.wait(WAIT)
    assert not is_mount_daemon(absolute.pid, str(mnt))


def test_run_captures_text_and_kills_on_its_timeout(kind: str, tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", CHILD, "echo"]
    done = zygote.run(cmd, timeout=WAIT, cwd=tmp_path)
    assert (done.args, done.returncode) == (cmd, 0)
    assert (done.stdout, done.stderr) == ("out one\nout two\n", "err line\n")
    failed = zygote.run([sys.executable, "-m", CHILD, "exit", "4"], timeout=WAIT, cwd=tmp_path)
    assert failed.returncode == 4
    marker = f"marker-{uuid.uuid4()}"
    with pytest.raises(subprocess.TimeoutExpired):
        zygote.run([sys.executable, "-m", CHILD, "sleep", marker], timeout=1.0, cwd=tmp_path)
    for entry in Path("/proc").iterdir():  # the timed-out child is gone, as run leaves it
        if entry.name.isdigit():
            try:
                assert marker.encode() not in (entry / "cmdline").read_bytes()
            except OSError:
                continue


def test_run_takes_the_childs_environment_and_its_input(kind: str, tmp_path: Path) -> None:
    """``run(env=..., input=...)`` as ``subprocess.run``'s: the child sees that environment (not
    this process's), reads the text on its stdin to its end, and without ``input`` the caller's
    stdin is inherited."""
    cmd = [sys.executable, "-m", CHILD, "cat", "ZYGOTE_TEST_VAR"]
    env = {**os.environ, "ZYGOTE_TEST_VAR": "given"}
    done = zygote.run(cmd, timeout=WAIT, cwd=tmp_path, env=env, input="line one\nline two\n")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == "given\nline one\nline two\n"
    empty = zygote.run(cmd, timeout=WAIT, cwd=tmp_path, env=env, input="")
    assert (empty.returncode, empty.stdout) == (0, "given\n")
    big = "x" * 300_000 + "\n"  # more than a pipe holds: fed while the output is read
    whole = zygote.run(cmd, timeout=WAIT, cwd=tmp_path, env=env, input=big)
    assert whole.stdout == "given\n" + big
    assert "ZYGOTE_TEST_VAR" not in os.environ


def test_a_different_interpreter_setting_starts_a_fresh_interpreter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(zygote.ENV_SWITCH, "1")
    monkeypatch.setenv(
        "PYTHONDONTWRITEBYTECODE", "1" if os.environ.get("PYTHONDONTWRITEBYTECODE") != "1" else ""
    )
    proc = start("plain", tmp_path, "exit", "5")
    assert proc.wait(WAIT) == 5


def test_a_pythonpath_of_the_preloaded_packages_own_directory_forks_and_another_copy_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child's ``PYTHONPATH`` that names where the zygote imported datahub from (a test's
    ``PYTHONPATH=<checkout>``) is forked, its entries after the working directory on its path
    as in a fresh interpreter's; one whose entry holds another ``datahub`` starts fresh."""
    monkeypatch.setenv(zygote.ENV_SWITCH, "1")
    own = zygote._get()
    assert own is not None
    origin = own.origins["datahub"]
    extra = tmp_path / "extra"
    extra.mkdir()
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(extra), origin]))
    seen = report("zygote", tmp_path, tmp_path)
    assert [os.path.realpath(p) for p in seen["path"][:3]] == [str(tmp_path), str(extra), origin]
    other = tmp_path / "other"
    (other / "datahub").mkdir(parents=True)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(other), origin]))
    proc = start("plain", tmp_path, "exit", "0")
    assert proc.wait(WAIT) == 0


def test_the_zygote_has_one_thread_and_dies_with_its_owner(tmp_path: Path) -> None:
    owner = subprocess.run(
        [
            sys.executable,
            "-c",
            "from tests import zygote; z = zygote._get(); print(z.proc.pid, flush=True); import os; os._exit(0)",
        ],
        capture_output=True,
        text=True,
        cwd=zygote.REPO,
        timeout=WAIT,
        env={**os.environ, zygote.ENV_SWITCH: "1"},
    )
    pid = int(owner.stdout.split()[0])
    deadline = time.monotonic() + WAIT
    while Path(f"/proc/{pid}").exists() and Path(f"/proc/{pid}/cmdline").read_bytes():
        assert time.monotonic() < deadline, "the zygote outlived its owner"
        time.sleep(0.02)
    mine = zygote._get()
    assert mine is not None
    assert os.listdir(f"/proc/{mine.proc.pid}/task") == [str(mine.proc.pid)]
