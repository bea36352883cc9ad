"""What the soak keeps running on the compute nodes, and brings back after a fault, as CSI
and a job scheduler would: mount daemons, the write-back cycles, the pack job's workers.

Every wait is bounded (a hang guard); every process is started through its host, so the
network's teardown kills whatever is left even after a crash of the harness.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import IO

from fuse_adapter.daemon import is_mounted, read_record
from tests.multihost.cluster import FUSE, Node

GUARD = 120.0  # seconds any one heal or start may take before the soak reports it failed


class Mount:
    """One ``datahub mount --foreground`` daemon on a node; restartable after kill -9."""

    def __init__(self, node: Node, mountpoint: Path, args: list[str], logs: Path) -> None:
        self.node, self.mountpoint, self.args, self.logs = node, mountpoint, list(args), logs
        self.lock = threading.RLock()
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self._log: IO[bytes] | None = None

    def start(self, guard: float = GUARD) -> None:
        """Mount (over a stale mount point too); retried until it serves or ``guard`` passes."""
        deadline = time.monotonic() + guard
        with self.lock:
            while True:
                with contextlib.suppress(OSError):  # a stale mount point answers ENOTCONN
                    self.mountpoint.mkdir(parents=True, exist_ok=True)
                log = (
                    self.logs
                    / f"mount-{self.node.host.name}-{self.mountpoint.name}-{self.starts + 1:03d}.log"
                )
                self._log = open(log, "ab")  # noqa: SIM115 - closed by umount
                cmd = [
                    *FUSE,
                    "--config",
                    str(self.node.config_path),
                    "mount",
                    str(self.mountpoint),
                    *self.args,
                ]
                self.proc = self.node.host.popen([*cmd, "--foreground"], log=self._log, env=self.node.env)
                self.starts += 1
                while not self._serving() and self.proc.poll() is None:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.1)
                if self._serving():
                    return
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.kill()
                    self.proc.wait(30)
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"mount {self.mountpoint} on {self.node.host.name}: not serving after {guard}s"
                    )
                time.sleep(1.0)

    def _serving(self) -> bool:
        """This daemon serves the mount point: mounted, and the mount record (written once it
        is ready) names its pid. A stale mount of a killed daemon is mounted too, until the
        new daemon detaches it, so ``is_mounted`` alone would call a failing remount healed."""
        if self.proc is None or self.proc.poll() is not None or not is_mounted(str(self.mountpoint)):
            return False
        home = Path(tomllib.loads(self.node.config_path.read_text())["home"])
        record = read_record(home, str(self.mountpoint))
        return record is not None and record.pid == self.proc.pid

    def kill9(self) -> subprocess.Popen | None:
        """kill -9 the daemon (None if none was running); its mount point is left stale."""
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                return None
            self.proc.kill()
            self.proc.wait(30)
            return self.proc

    def heal(self, killed: subprocess.Popen | None) -> bool:
        """Mount again after ``killed`` died, as CSI would; nothing to do if the daemon was
        not ours to kill, or was unmounted or replaced since (False then)."""
        with self.lock:
            if killed is None or self.proc is not killed:
                return False
            self.start()
            return True

    def start_with(self, args: list[str]) -> None:
        with self.lock:
            self.args = list(args)
            self.start()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def umount(self, timeout: float = GUARD) -> int | None:
        """``datahub umount`` (flush and, for a workspace, commit); the daemon's exit code
        (None if it had died before: then umount's recovery flushed and committed)."""
        with self.lock:
            was_alive = self.alive()
            self.node.cli(
                "umount",
                str(self.mountpoint),
                "--timeout",
                str(int(timeout)),
                check=False,
                timeout=timeout + 60,
            )
            if is_mounted(str(self.mountpoint)):
                subprocess.run(["fusermount3", "-uz", str(self.mountpoint)], check=False)
            rc = None
            if self.proc is not None:
                try:
                    rc = self.proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    rc = self.proc.wait(30)
            if self._log is not None:
                self._log.close()
            self.proc = None
            return rc if was_alive else None


class WorkspaceCycles:
    """A node's write-back workspace, committed as a version every ``every`` seconds.

    The writer pauses (control file), the daemon is unmounted (flush + commit), the next
    cycle's workspace is mounted at the same path and the writer resumes. A commit that
    failed (its daemon exited non-zero) is retried by mounting that workspace again and
    unmounting it, now and after the heal, until it succeeds.
    """

    def __init__(self, node: Node, mountpoint: Path, control: Path, logs: Path, every: float) -> None:
        self.node, self.control, self.every = node, control, every
        self.mount = Mount(node, mountpoint, [], logs)
        self.logs = logs
        self.cycle = 0
        self.committed: dict[int, bool] = {}
        self.attempts: dict[int, int] = {}
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"cycles-{node.host.name}", daemon=True)
        self.error: str = ""

    def name(self, cycle: int) -> str:
        return f"w-{self.node.host.name}-{cycle}"

    def args(self, cycle: int) -> list[str]:
        # the default write path (through the daemon). Staged files (--passthrough) are opt-in:
        # this soak found that a write(2) failing with ENOSPC on a full node disk is never seen by
        # the daemon, so the next close commits a torn prefix (docs/writeback.md, "Limits of
        # staged files"; tests/fuse/test_remount.py, the strict xfail on a torn staged file)
        return ["--workspace", self.name(cycle), "--commit-to", f"out-{self.node.host.name}"]

    def _set(self, cycle: int, run: bool) -> None:
        tmp = self.control.with_suffix(".tmp")
        tmp.write_text(json.dumps({"cycle": cycle, "run": run}))
        tmp.replace(self.control)

    def _paused(self, cycle: int, guard: float) -> bool:
        paused = self.control.with_suffix(".paused")
        deadline = time.monotonic() + guard
        while time.monotonic() < deadline:
            with contextlib.suppress(FileNotFoundError, ValueError):
                said = paused.read_text()
                if said == "done" or int(said) == cycle:  # "done": the writer has stopped
                    return True
            time.sleep(0.05)
        return False

    def begin(self) -> None:
        self.mount.start_with(self.args(0))
        self._set(0, True)
        self.thread.start()

    def _commit(self, cycle: int) -> None:
        """Unmount (flush + commit) the cycle's workspace; True once its daemon exited 0."""
        self.attempts[cycle] = self.attempts.get(cycle, 0) + 1
        rc = self.mount.umount()
        # rc None: the daemon was dead (a fault) and umount's recovery committed, or not: retried
        self.committed[cycle] = rc == 0

    def _retry(self, cycle: int) -> None:
        self.mount.start_with(self.args(cycle))
        self._commit(cycle)

    def _run(self) -> None:
        try:
            while not self.stopping.wait(self.every):
                self._next()
        except Exception as exc:  # the thread's top level: reported by the soak, never silent
            self.error = f"{type(exc).__name__}: {exc}"

    def _next(self) -> None:
        cycle = self.cycle
        self._set(cycle, False)
        if not self._paused(cycle, GUARD):
            raise TimeoutError(f"writer on {self.node.host.name} did not pause in cycle {cycle}")
        self._commit(cycle)
        self.cycle = cycle + 1
        self.mount.start_with(self.args(self.cycle))
        self._set(self.cycle, True)

    def finish(self, guard: float = 600.0) -> None:
        """After the run: commit the last cycle, then retry every failed commit until done."""
        self.stopping.set()
        self.thread.join(GUARD * 3)
        cycle = self.cycle
        self._set(cycle, False)
        self._paused(cycle, GUARD)
        self._commit(cycle)
        deadline = time.monotonic() + guard
        while time.monotonic() < deadline:
            failed = [c for c, ok in self.committed.items() if not ok]
            if not failed:
                return
            for c in failed:
                with contextlib.suppress(TimeoutError):
                    self._retry(c)
            time.sleep(1.0)


class PackJobs:
    """Pack jobs one after another, each with a leased worker on both nodes.

    ``plan(n)`` plans job ``n`` (returns its id). A worker that exits non-zero or is killed
    is started again (after a kill, by the fault's heal); the next job starts once both
    workers of a job exited 0.
    """

    def __init__(self, nodes: list[Node], plan: Callable[[int], str], logs: Path, lease: str = "3") -> None:
        self.nodes, self.plan, self.logs, self.lease = nodes, plan, logs, lease
        self.lock = threading.RLock()
        self.job_no = 0
        self.job = ""
        self.procs: dict[str, subprocess.Popen | None] = {}
        self.done: dict[str, bool] = {}
        self.held: set[str] = set()  # nodes whose worker a fault killed and has not healed yet
        self.finished: list[tuple[int, str]] = []
        self.exits: list[int] = []
        self.stopping = threading.Event()
        self.error = ""
        self.thread = threading.Thread(target=self._run, name="pack-jobs", daemon=True)

    def _start(self, node: Node) -> None:
        name = node.host.name
        log = open(self.logs / f"pack-worker-{name}.log", "ab")  # noqa: SIM115 - the process's lifetime
        argv = node.cli_argv("--json", "pack-worker", "--job", self.job, "--lease", self.lease)
        self.procs[name] = node.host.popen(argv, log=log, env=node.env)

    def _new_job(self) -> None:
        self.job_no += 1
        self.job = self.plan(self.job_no)
        self.done = {n.host.name: False for n in self.nodes}
        for node in self.nodes:
            self._start(node)

    def kill9(self, name: str) -> bool:
        with self.lock:
            proc = self.procs.get(name)
            self.held.add(name)
            if proc is None or proc.poll() is not None:
                return False
            proc.kill()
            proc.wait(30)
            return True

    def heal(self, name: str) -> None:
        with self.lock:
            self.held.discard(name)

    def _run(self) -> None:
        try:
            with self.lock:
                self._new_job()
            while not self.stopping.wait(0.5):
                with self.lock:
                    self._tend()
        except Exception as exc:  # the thread's top level: reported by the soak, never silent
            self.error = f"{type(exc).__name__}: {exc}"

    def _tend(self) -> None:
        for node in self.nodes:
            name = node.host.name
            proc = self.procs.get(name)
            if proc is None or proc.poll() is None or self.done[name] or name in self.held:
                continue
            self.exits.append(proc.returncode)
            if proc.returncode == 0:
                self.done[name] = True
            elif name not in self.held:
                self._start(node)  # a failed worker (not a held kill): start another
        if all(self.done.values()):
            self.finished.append((self.job_no, self.job))
            self._new_job()

    def begin(self) -> None:
        self.thread.start()

    def finish(self, guard: float = 300.0) -> None:
        """After the run: let the current job finish (restart dead workers), then stop."""
        self.stopping.set()
        self.thread.join(GUARD)
        deadline = time.monotonic() + guard
        with self.lock:
            self.held.clear()
            while time.monotonic() < deadline:
                for node in self.nodes:
                    name = node.host.name
                    proc = self.procs.get(name)
                    if proc is not None and proc.poll() is not None and not self.done[name]:
                        self.exits.append(proc.returncode)
                        if proc.returncode == 0:
                            self.done[name] = True
                        else:
                            self._start(node)
                if all(self.done.values()):
                    self.finished.append((self.job_no, self.job))
                    return
                time.sleep(0.5)
            for proc in self.procs.values():
                if proc is not None and proc.poll() is None:
                    proc.kill()
