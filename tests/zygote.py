"""Test daemons forked from a pre-imported interpreter (a "zygote") instead of a fresh one.

Why: a mount daemon's interpreter start is ~0.45 CPU-s of imports (pydantic, trio, pyfuse3,
botocore, datahub's own modules), and tests/fuse starts hundreds of them on CI's 2 shared
cores. Each xdist worker (each process that asks) starts one zygote, ``python -c`` that
imports those modules once, then waits on a socket pair; every ``python -m MODULE ARGS`` the
tests start through ``spawn`` or ``run`` is a fork of it that runs MODULE as ``python -m``
would (``runpy``), with the caller's environment, working directory and standard streams, and
its ``/proc/PID/cmdline`` rewritten to that argv (``fuse_adapter.daemon.is_mount_daemon``,
``datahub umount`` and the teardown read it).

What a fork cannot be told from a fresh interpreter: the modules in ``PRELOAD`` are imported
before the caller's environment is set. Only modules that read no environment, working
directory, home, pid or configuration at import are listed (datahub's were audited: their
module-level state is constants, and per-process state is reset by their own
``os.register_at_fork`` hooks). A caller whose ``PYTHON*`` variables differ from the
zygote's (an interpreter option, a ``sitecustomize`` on ``PYTHONPATH``) gets a fresh
interpreter, and so does every call with ``DATAHUB_TEST_ZYGOTE=0`` or when the zygote cannot
start: the plain ``subprocess`` path, unchanged.

The zygote has no thread when it forks (checked before it says it is ready), dies with the
process that started it (``PR_SET_PDEATHSIG``), reaps its children and reports each one's
exit status; the caller waits on a pidfd (``ZygoteProcess``: what the tests use of
``subprocess.Popen``).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import locale
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ENV_SWITCH = "DATAHUB_TEST_ZYGOTE"

#: what the zygote imports before it forks: what ``python -X importtime -m fuse_adapter mount
#: ... --foreground`` showed costly (third-party first; a missing one is skipped). Never a
#: module a child runs (``fuse_adapter.__main__``): runpy warns when it is already imported
PRELOAD = (
    "pydantic",
    "pydantic_core",
    "annotated_types",
    "trio",
    "pyfuse3",
    "boto3",
    "botocore.session",
    "botocore.client",
    "s3transfer.manager",
    "urllib3",
    "lmdb",
    "xxhash",
    "sqlite3",
    "email.parser",
    "http.client",
    "multiprocessing",
    "concurrent.futures",
    "fuse_adapter.mount_cmd",
    "fuse_adapter.mount_assembly",
    "fuse_adapter.fuse_ops",
    "fuse_adapter.fuse_session",
    # a ``--workspace`` daemon's own (0.12 CPU-s of imports each: ~90 workspace mounts a run)
    "fuse_adapter.workspace",
    "fuse_adapter.allocator",
    "fuse_adapter.quota",
    "datahub.writeback",
    "datahub.workspaces",
    "datahub.storage.s3",
    "datahub.catalog.sqlite_store",
    "datahub.cache.warmup_policy",
    "datahub.console.runner",
    "datahub.console.context",
)

_PR_SET_PDEATHSIG = 1
_PR_SET_MM = 35
_PR_SET_MM_MAP = 14
_MSG = 1 << 20  # bytes of one message: a request carries the whole environment
_EXIT_POLL = 0.005  # s between asks for the status of a child whose pidfd said it exited


# --- the zygote (its own process) --------------------------------------------------------------


def _prctl(option: int, *args: int) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    padded = [*args, 0, 0, 0, 0][:4]
    if libc.prctl(option, *padded) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}, {args}): {os.strerror(err)}")
    return 0


_argv_buffer: ctypes.Array | None = None  # the rewritten cmdline: kept alive for the process's life


class _MmMap(ctypes.Structure):
    """``struct prctl_mm_map`` (linux/prctl.h)."""

    _fields_ = [
        *(
            (name, ctypes.c_uint64)
            for name in (
                "start_code",
                "end_code",
                "start_data",
                "end_data",
                "start_brk",
                "brk",
                "start_stack",
                "arg_start",
                "arg_end",
                "env_start",
                "env_end",
            )
        ),
        ("auxv", ctypes.c_void_p),
        ("auxv_size", ctypes.c_uint32),
        ("exe_fd", ctypes.c_uint32),
    ]


def set_cmdline(argv: Sequence[str]) -> None:
    """Make ``/proc/self/cmdline`` read ``argv`` (as the kernel shows a process's arguments): a
    PR_SET_MM_MAP of the process's own memory map with the arguments' range moved onto a buffer
    kept for the process's life. Needs CAP_CHECKPOINT_RESTORE (or CAP_SYS_ADMIN); the
    single-field PR_SET_MM_ARG_START needs CAP_SYS_RESOURCE, which containers often drop."""
    global _argv_buffer
    data = b"".join(os.fsencode(a) + b"\0" for a in argv)
    buf = ctypes.create_string_buffer(data, len(data))
    with open("/proc/self/stat", "rb") as fh:
        fields = [0, 0, 0, *map(int, fh.read().rsplit(b")", 1)[1].split()[1:])]  # field N at [N - 1]
    libc = ctypes.CDLL(None, use_errno=True)
    libc.sbrk.restype = ctypes.c_void_p
    mm = _MmMap(
        start_code=fields[25], end_code=fields[26], start_stack=fields[27],
        start_data=fields[44], end_data=fields[45], start_brk=fields[46],
        brk=libc.sbrk(0) or fields[46],
        arg_start=ctypes.addressof(buf), arg_end=ctypes.addressof(buf) + len(data),
        env_start=fields[49], env_end=fields[50],
        auxv=None, auxv_size=0, exe_fd=0xFFFFFFFF,
    )  # fmt: skip
    _prctl(_PR_SET_MM, _PR_SET_MM_MAP, ctypes.addressof(mm), ctypes.sizeof(mm))
    _argv_buffer = buf


#: what CPython ignores at start-up whatever it inherited
_STARTUP_IGNORED = (signal.SIGPIPE, signal.SIGXFSZ)


def _fresh_signals(ignored: set[int]) -> None:
    """The dispositions of a fresh interpreter exec'd by the caller: what the caller ignores
    stays ignored (exec keeps SIG_IGN), a handled signal is back to default (exec resets it),
    then CPython's own start: SIGINT raises KeyboardInterrupt unless ignored, SIGPIPE and
    SIGXFSZ ignored."""
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        if sig in ignored or sig in _STARTUP_IGNORED:
            handler = signal.SIG_IGN
        elif sig == signal.SIGINT:
            handler = signal.default_int_handler
        else:
            handler = signal.SIG_DFL
        with contextlib.suppress(OSError, ValueError):
            signal.signal(sig, handler)


def _caller_signals() -> tuple[list[int], list[int]]:
    """The signals this process ignores and the calling thread blocks: what a Popen child
    inherits through exec."""
    ignored = []
    for sig in signal.valid_signals():
        with contextlib.suppress(OSError, ValueError):
            if signal.getsignal(sig) is signal.SIG_IGN and sig not in _STARTUP_IGNORED:
                ignored.append(int(sig))
    return ignored, [int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])]


def _exit_code(exc: SystemExit) -> int:
    """What ``python`` exits with for an uncaught SystemExit (its message on stderr)."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    with contextlib.suppress(Exception):
        print(code, file=sys.stderr)
    return 1


def _run_child(request: dict, fds: list[int], started: int) -> None:
    """The forked child: become ``python -m MODULE ARGS`` and run it. Never returns. Writes a
    byte to ``started`` once it is that process (its streams, directory, environment and
    cmdline), as Popen returns once its child has exec'd."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        _fresh_signals(set(request["ignored"]))
        signal.pthread_sigmask(signal.SIG_SETMASK, request["blocked"])
        if started < len(fds):  # never overwritten by a descriptor handed to the child
            started = fcntl.fcntl(started, fcntl.F_DUPFD_CLOEXEC, len(fds))
        for target, fd in enumerate(fds):
            os.dup2(fd, target, inheritable=True)
        os.closerange(len(fds), started)
        os.closerange(started + 1, os.sysconf("SC_OPEN_MAX"))
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        argv = request["argv"]
        set_cmdline(argv)
        # ``python -m``'s path: the working directory, then $PYTHONPATH's entries (the child's,
        # never the zygote's own: ``Zygote.fits`` checked they name the preloaded packages' own
        # directories), then the interpreter's own
        own = set(_ZYGOTE_PATH)
        rest = [p for p in sys.path[1:] if os.path.realpath(p) not in own]
        given = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:] = [os.getcwd(), *given, *rest]
        sys.argv = ["-m", *argv[3:]]  # runpy puts the module's file name first, as ``-m`` does
        for stream in (sys.stdout, sys.stderr):
            stream.reconfigure(line_buffering=stream is sys.stderr or os.isatty(stream.fileno()))
        import runpy
        import traceback

        os.write(started, b"s")
        os.close(started)
    except BaseException:  # the child must never return into the zygote's loop
        with contextlib.suppress(Exception):
            import traceback

            traceback.print_exc()
        os._exit(1)
    try:
        runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc)
    except KeyboardInterrupt:
        traceback.print_exc()
        _finish(0)
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # as python does: die of the SIGINT
        os.kill(os.getpid(), signal.SIGINT)
        code = 130
    except BaseException:
        traceback.print_exc()
        code = 1
    _finish(code)
    os._exit(code)


def _finish(code: int) -> None:
    """An interpreter's exit, short of its finalization: non-daemon threads joined, atexit
    handlers run, the standard streams flushed."""
    import atexit

    with contextlib.suppress(BaseException):
        threading._shutdown()  # type: ignore[attr-defined]
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()


def _origins(loaded: Sequence[str]) -> dict[str, str]:
    """Where each preloaded top-level package was imported from: the directory that holds it
    (what a caller's ``PYTHONPATH`` entry must be, to name the same one: ``Zygote.fits``)."""
    origins = {}
    for name in loaded:
        top = sys.modules.get(name.partition(".")[0])
        spec = getattr(top, "__spec__", None)
        where = getattr(spec, "origin", None) if spec is not None else None
        if where and os.path.isabs(where):
            parent = os.path.dirname(where)
            if os.path.basename(where) == "__init__.py":
                parent = os.path.dirname(parent)
            origins[name.partition(".")[0]] = os.path.realpath(parent)
    return origins


def _python_path(env: Mapping[str, str]) -> list[str]:
    return [os.path.realpath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]


_ZYGOTE_PATH = _python_path(os.environ)  # in the zygote: its own $PYTHONPATH, read at its start


def serve(fd: int, parent: int) -> None:
    """The zygote's loop: import ``PRELOAD``, say ready, then fork a child per request."""
    sock = socket.socket(fileno=fd)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the death signal was armed
        os._exit(0)
    loaded, missing = [], []
    for name in PRELOAD:
        try:
            __import__(name)
            loaded.append(name)
        except ImportError:
            missing.append(name)
    try:  # the probe of what every child does: the zygote's own arguments, unchanged
        set_cmdline(sys.orig_argv)
    except OSError as exc:
        sock.send(json.dumps({"error": f"cannot rewrite a child's cmdline: {exc}"}).encode())
        os._exit(1)
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1 or threading.active_count() != 1:
        sock.send(json.dumps({"error": f"{threads} threads after the imports"}).encode())
        os._exit(1)
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    origins = _origins(loaded)
    sock.send(
        json.dumps({"ready": os.getpid(), "loaded": loaded, "missing": missing, "origins": origins}).encode()
    )
    running: dict[int, int] = {}  # pid -> serial
    done: dict[int, int] = {}  # serial -> returncode (Popen's: -N for a signal)
    serial = 0

    def reap() -> None:
        while running:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid in running:
                done[running.pop(pid)] = os.waitstatus_to_exitcode(status)

    while True:
        ready, _, _ = select.select([sock, wake_r], [], [])
        if wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                while os.read(wake_r, 512):
                    pass
            reap()
        if sock not in ready:
            continue
        msg, fds, _flags, _addr = socket.recv_fds(sock, _MSG, 4)
        if not msg:
            os._exit(0)  # the caller is gone
        request = json.loads(msg)
        if request["op"] == "spawn":
            serial += 1
            started_r, started_w = os.pipe2(os.O_CLOEXEC)
            pid = os.fork()
            if pid == 0:
                sock.close()
                os.close(wake_r)
                os.close(wake_w)
                os.close(started_r)
                _run_child(request, fds, started_w)
            os.close(started_w)
            for fd in fds:
                os.close(fd)
            with contextlib.suppress(OSError):
                os.read(started_r, 1)  # b"": it failed before (its traceback is on its stderr)
            os.close(started_r)
            running[pid] = serial
            pidfd = os.pidfd_open(pid)
            socket.send_fds(sock, [json.dumps({"pid": pid, "serial": serial}).encode()], [pidfd])
            os.close(pidfd)
        elif request["op"] == "status":
            reap()
            sock.send(json.dumps({"returncode": done.get(request["serial"])}).encode())


# --- the caller's side -----------------------------------------------------------------------------


class ZygoteProcess:
    """A child of the zygote, as the tests use a ``subprocess.Popen``: pid, args, returncode,
    poll, wait (``subprocess.TimeoutExpired``), send_signal, terminate, kill. Waits on a pidfd;
    the zygote, the child's parent, reports its status. Signals go through the pidfd, never to
    a pid the kernel may have given to another process since."""

    def __init__(self, zygote: Zygote, args: list[str], pid: int, serial: int, pidfd: int) -> None:
        self._zygote = zygote
        self.args = args
        self.pid = pid
        self._serial = serial
        self._pidfd: int | None = pidfd
        self.returncode: int | None = None
        self.stdout = self.stderr = self.stdin = None
        self._lock = threading.Lock()

    def _exited(self, timeout: float | None) -> bool:
        fd = self._pidfd
        if fd is None:
            return True
        ready, _, _ = select.select([fd], [], [], timeout)
        return bool(ready)

    def _collect(self) -> int:
        with self._lock:
            if self.returncode is None:
                while (code := self._zygote.status(self._serial)) is None:
                    time.sleep(_EXIT_POLL)  # exited, not reaped yet
                self.returncode = code
                if self._pidfd is not None:
                    os.close(self._pidfd)
                    self._pidfd = None
            return self.returncode

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        return self._collect() if self._exited(0) else None

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is not None:
            return self.returncode
        if not self._exited(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self._collect()

    def send_signal(self, sig: int) -> None:
        if self.poll() is not None:
            return
        with self._lock:
            if self._pidfd is not None:
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(self._pidfd, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def __enter__(self) -> ZygoteProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.wait()

    def __del__(self) -> None:
        if self._pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(self._pidfd)


class Zygote:
    """The caller's end of one zygote: ``spawn`` a ``python -m`` child, ask a child's status."""

    def __init__(self) -> None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        code = f"from tests.zygote import serve; serve({theirs.fileno()}, {os.getpid()})"
        self.env = _process_env()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            cwd=REPO,
        )
        theirs.close()
        self._sock = mine
        self._lock = threading.Lock()
        ready, _, _ = select.select([mine], [], [], 60)
        answer = json.loads(mine.recv(_MSG) or b"{}") if ready else {}
        if "ready" not in answer:
            self.close()
            raise OSError(f"the test zygote did not start: {answer or 'no answer in 60 s'}")
        self.loaded: list[str] = answer["loaded"]
        self.origins: dict[str, str] = answer["origins"]

    def close(self) -> None:
        self._sock.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def fits(self, env: dict[str, str]) -> bool:
        """The interpreter a fresh ``python`` would start under ``env`` is the zygote's: the
        same ``PYTHON*`` variables, but for ``PYTHONPATH``, whose entries the child puts on its
        path as a fresh one would, so long as none holds another copy of a preloaded package
        than the one the zygote imported (a test's ``PYTHONPATH=<checkout>`` when the checkout
        is installed editable, or already the zygote's path, fits)."""

        def py(e: dict[str, str]) -> dict[str, str]:
            return {k: v for k, v in e.items() if k.startswith("PYTHON") and k != "PYTHONPATH"}

        if py(env) != py(self.env) or self.proc.poll() is not None:
            return False
        for entry in _python_path(env):
            for top, origin in self.origins.items():
                here = os.path.join(entry, top)
                if (os.path.isdir(here) or os.path.exists(here + ".py")) and entry != origin:
                    return False  # a fresh interpreter would import another copy of ``top``
        given = _python_path(env)
        for entry in _python_path(self.env):  # an entry the zygote imported a package from
            if entry in self.origins.values() and entry not in given:
                return False  # a fresh interpreter without it could import another copy
        return True

    def spawn(self, args: list[str], env: dict[str, str], cwd: str, fds: Sequence[int]) -> ZygoteProcess:
        ignored, blocked = _caller_signals()
        request = {
            "op": "spawn",
            "argv": args,
            "env": env,
            "cwd": cwd,
            "ignored": ignored,
            "blocked": blocked,
        }
        request = json.dumps(request).encode()
        with self._lock:
            socket.send_fds(self._sock, [request], list(fds))
            msg, got, _flags, _addr = socket.recv_fds(self._sock, _MSG, 1)
        if not msg or len(got) != 1:
            raise OSError(f"the test zygote did not start {args}")
        answer = json.loads(msg)
        return ZygoteProcess(self, args, answer["pid"], answer["serial"], got[0])

    def status(self, serial: int) -> int | None:
        with self._lock:
            self._sock.send(json.dumps({"op": "status", "serial": serial}).encode())
            msg = self._sock.recv(_MSG)
        if not msg:
            raise OSError("the test zygote is gone")
        return json.loads(msg)["returncode"]


_zygote: Zygote | None = None
_owner = 0  # the process whose zygote ``_zygote`` is
_failed = False
_start_lock = threading.Lock()


def _get() -> Zygote | None:
    """This process's zygote, started on first use (from the main thread only: the death
    signal follows the thread that started it), or None: use a fresh interpreter."""
    global _zygote, _owner, _failed
    if os.environ.get(ENV_SWITCH, "1") == "0":
        return None
    with _start_lock:
        if _zygote is not None and _owner == os.getpid():
            return _zygote
        if _failed or threading.current_thread() is not threading.main_thread():
            return None
        try:
            _zygote, _owner = Zygote(), os.getpid()
        except OSError as exc:
            _failed = True
            print(f"tests.zygote: fresh interpreters for this run ({exc})", file=sys.stderr)
            return None
        return _zygote


def _zygote_for(cmd: Sequence[str], env: dict[str, str]) -> Zygote | None:
    if len(cmd) < 3 or cmd[0] != sys.executable or cmd[1] != "-m":
        return None
    zygote = _get()
    return zygote if zygote is not None and zygote.fits(env) else None


def _process_env() -> dict[str, str]:
    """The environment a Popen without ``env`` hands its child: the C library's ``environ``,
    which is ``os.environ`` plus what a C library set behind its back (readline's ncurses sets
    ``LINES`` and ``COLUMNS``)."""
    libc = ctypes.CDLL(None)
    entries = ctypes.POINTER(ctypes.c_char_p).in_dll(libc, "environ")
    env: dict[str, str] = {}
    i = 0
    while (entry := entries[i]) is not None:
        key, sep, value = os.fsdecode(entry).partition("=")
        if sep:
            env.setdefault(key, value)
        i += 1
    return env


def _fd_or_devnull(fd: int, stack: contextlib.ExitStack) -> int:
    try:
        os.fstat(fd)
        return fd
    except OSError:
        null = os.open(os.devnull, os.O_RDWR)
        stack.callback(os.close, null)
        return null


#: in ``popen``'s ``cmd``: the number the child knows ``pass_fd`` by
PASSED_FD = "{passed_fd}"


def popen(
    cmd: list[str],
    *,
    stdout: int,
    stderr: int,
    cwd: Path | str,
    pass_fd: int | None = None,
    env: Mapping[str, str] | None = None,
) -> ZygoteProcess | subprocess.Popen:
    """``subprocess.Popen(cmd, stdout=stdout, stderr=stderr, cwd=cwd, pass_fds=[pass_fd], env=env)``
    (file descriptors; stdin inherited) for ``cmd`` = ``[sys.executable, "-m", MODULE, ...]``: a
    fork of the zygote, or that Popen. ``env``: the child's whole environment (None: this
    process's). ``PASSED_FD`` in ``cmd`` is replaced by the number of ``pass_fd`` in the child (3
    in a fork of the zygote), e.g. a mount daemon's ``--ready-fd``: its caller then waits on the
    pipe instead of polling for the mount."""
    child_env = _process_env() if env is None else dict(env)
    zygote = _zygote_for(cmd, child_env)
    if zygote is None:
        if pass_fd is not None:
            cmd = [str(pass_fd) if a == PASSED_FD else a for a in cmd]
        return subprocess.Popen(
            cmd,
            stdout=stdout,
            stderr=stderr,
            cwd=cwd,
            pass_fds=() if pass_fd is None else (pass_fd,),
            env=None if env is None else child_env,
        )
    with contextlib.ExitStack() as stack:
        stdin = _fd_or_devnull(0, stack)
        fds = [stdin, stdout, stderr, *(() if pass_fd is None else (pass_fd,))]
        cmd = [str(len(fds) - 1) if a == PASSED_FD else a for a in cmd]
        return zygote.spawn(list(cmd), child_env, str(cwd), fds)


def _feed(fd: int, text: str) -> None:
    """Write ``text`` (the locale's encoding, as ``text=True`` does) to ``fd`` and close it; a
    child that exits without reading it all is no error (``subprocess`` ignores that too)."""
    try:
        with contextlib.suppress(BrokenPipeError):
            data = text.encode(locale.getpreferredencoding(False))
            while data:
                data = data[os.write(fd, data) :]
    finally:
        os.close(fd)


def _text(data: bytes) -> str:
    """What ``text=True`` gives: the locale's encoding, universal newlines."""
    text = data.decode(locale.getpreferredencoding(False))
    return text.replace("\r\n", "\n").replace("\r", "\n")


def run(
    cmd: list[str],
    *,
    timeout: float,
    cwd: Path | str,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env,
    input=input)`` for ``cmd`` = ``[sys.executable, "-m", MODULE, ...]``: a fork of the zygote,
    or that run. On the timeout the child is killed and ``subprocess.TimeoutExpired`` raised,
    as run does. ``env``: the child's whole environment (None: this process's); ``input``: text
    written to its stdin, which is then closed (None: stdin inherited)."""
    child_env = _process_env() if env is None else dict(env)
    zygote = _zygote_for(cmd, child_env)
    if zygote is None:
        return subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env, input=input
        )
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    in_r = in_w = -1
    if input is not None:
        in_r, in_w = os.pipe()
    try:
        with contextlib.ExitStack() as stack:
            stdin = _fd_or_devnull(0, stack) if in_r < 0 else in_r
            proc = zygote.spawn(list(cmd), child_env, str(cwd), [stdin, out_w, err_w])
    finally:
        os.close(out_w)
        os.close(err_w)
        if in_r >= 0:
            os.close(in_r)
    if input is not None:
        threading.Thread(target=_feed, args=(in_w, input), daemon=True).start()
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    open_fds = [out_r, err_r]
    deadline = time.monotonic() + timeout
    try:
        while open_fds:
            left = deadline - time.monotonic()
            if left <= 0:
                proc.kill()
                proc.wait()
                raise subprocess.TimeoutExpired(cmd, timeout)
            ready, _, _ = select.select(open_fds, [], [], left)
            for fd in ready:
                data = os.read(fd, 65536)
                if data:
                    chunks[fd].append(data)
                else:
                    open_fds.remove(fd)
        left = max(deadline - time.monotonic(), 0.0)
        try:
            proc.wait(timeout=left)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
    finally:
        os.close(out_r)
        os.close(err_r)
    out, err = (_text(b"".join(chunks[fd])) for fd in (out_r, err_r))
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
