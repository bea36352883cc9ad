"""A throw-away network of hosts made of Linux network namespaces, for multi-host tests.

Why: datahub's nodes talk to one API server and one object store over a real network; a
test on loopback cannot show what happens when a host restarts or a cable is pulled. Here
each "host" is a network namespace with one veth (``eth0``) plugged into a bridge that
lives in a "switch" namespace of its own, so the root namespace's links, routes and
firewall are never touched and traffic can reach only the test hosts' addresses
(10.213.0.0/16, no default route anywhere).

Processes join a host with ``nsenter --net`` (not ``ip netns exec``): they keep the root
mount namespace, so a FUSE mount made on a host is visible to the test process, which
reads it like a user on that node would.

Names start with ``dhmh-<pid>-``; :func:`clean_leftovers` removes the namespaces of runs
whose process is gone (a crashed or killed earlier run), so names never collide.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from datahub.procs import pid_alive
from tests import zygote
from tests.zygote import ZygoteProcess

REPO = Path(__file__).resolve().parents[2]
IN_HOST = "tests.multihost.in_host"  # ``python -m`` of it: MODULE run in a host's namespace
PREFIX = "dhmh-"
SUBNET = "10.213.0"  # hosts are SUBNET.<n>/24; nothing here leaves 10.213.0.0/16
_NAME = re.compile(rf"^{PREFIX}(\d+)-[0-9a-f]+-")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def netns_refusal() -> str | None:
    """Why ``ip netns`` cannot be used here (None if it can): the reason a test is skipped."""
    if shutil.which("ip") is None or shutil.which("nsenter") is None:
        return "iproute2 'ip' or util-linux 'nsenter' is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    probe = f"{PREFIX}{os.getpid()}-{secrets.token_hex(3)}-probe"
    res = _ip("netns", "add", probe, check=False)
    if res.returncode != 0:
        return f"'ip netns add' is refused here: {res.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def _delete_netns(name: str) -> None:
    """Kill what still runs in the namespace (it would keep it alive), then delete it."""
    res = _ip("netns", "pids", name, check=False)
    for pid in res.stdout.split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)
    _ip("netns", "del", name, check=False)


def clean_leftovers() -> list[str]:
    """Delete this module's namespaces left by runs whose process has died; returns their names."""
    res = _ip("netns", "list", check=False)
    gone = []
    for line in res.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        m = _NAME.match(name)
        if m and not pid_alive(int(m.group(1))):
            _delete_netns(name)
            gone.append(name)
    return gone


@dataclass
class Host:
    """One host: a network namespace with ``eth0`` at ``addr`` on the test network."""

    name: str  # short, e.g. "storage"
    netns: str
    addr: str
    procs: list[subprocess.Popen | ZygoteProcess] = field(default_factory=list)

    def argv(self, cmd: Sequence[str]) -> list[str]:
        """``cmd`` run inside this host's network namespace (root mount namespace kept)."""
        return ["nsenter", f"--net=/run/netns/{self.netns}", "--", *cmd]

    def run(
        self, cmd: Sequence[str], *, env: dict | None = None, timeout: float = 120, check: bool = True
    ) -> subprocess.CompletedProcess:
        res = subprocess.run(self.argv(cmd), capture_output=True, text=True, env=env, timeout=timeout)
        if check and res.returncode != 0:
            raise AssertionError(
                f"[{self.name}] {' '.join(cmd)} exited {res.returncode}:\n{res.stderr[-3000:]}"
            )
        return res

    def popen(self, cmd: Sequence[str], *, log: IO[bytes], env: dict | None = None) -> subprocess.Popen:
        """Start a long-running process on this host; it is killed when the network is torn down."""
        proc = subprocess.Popen(self.argv(cmd), stdout=log, stderr=subprocess.STDOUT, env=env)
        self.procs.append(proc)
        return proc

    def module_argv(self, module: str, args: Sequence[str]) -> list[str]:
        """``python -m MODULE ARGS`` run inside this host's network namespace (``-c``: ARGS[0]
        is code, as ``python -c``), by tests/multihost/in_host.py."""
        return [sys.executable, "-m", IN_HOST, self.netns, module, *args]

    def run_module(
        self,
        module: str,
        args: Sequence[str],
        *,
        env: dict | None = None,
        timeout: float = 120,
        check: bool = True,
    ) -> subprocess.CompletedProcess:
        """``run`` of ``python -m MODULE ARGS`` with the environment ``env`` (None: this process's): a fork of this
        process's pre-imported zygote (tests/zygote.py) that joins this host's network, not a
        fresh interpreter (~0.5 CPU-s of imports each); a fresh one where the zygote cannot
        serve (``DATAHUB_TEST_ZYGOTE=0``)."""
        res = zygote.run(self.module_argv(module, args), timeout=timeout, cwd=REPO, env=env)
        if check and res.returncode != 0:
            raise AssertionError(
                f"[{self.name}] python -m {module} {' '.join(args)} exited {res.returncode}:\n"
                f"{res.stderr[-3000:]}"
            )
        return res

    def popen_module(
        self, module: str, args: Sequence[str], *, log: IO[bytes], env: dict
    ) -> subprocess.Popen | ZygoteProcess:
        """``popen`` of ``python -m MODULE ARGS`` with the environment ``env`` (stdout and stderr
        to ``log``): a fork of the zygote as in ``run_module``; killed when the network is torn
        down, as ``popen``'s processes are."""
        cmd = self.module_argv(module, args)
        env = dict(env)
        # tests/zygote.py's ``popen`` hands the child this process's environment; a node's is
        # its own (its token, its Ceph client): the zygote's ``spawn`` takes it whole
        fork_of = zygote._zygote_for(cmd, env)
        if fork_of is None:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        else:
            with contextlib.ExitStack() as stack:
                stdin = zygote._fd_or_devnull(0, stack)
                proc = fork_of.spawn(cmd, env, str(REPO), [stdin, log.fileno(), log.fileno()])
        self.procs.append(proc)
        return proc

    def link(self, up: bool) -> None:
        """Plug (up) or pull (down) this host's network cable."""
        _ip("-n", self.netns, "link", "set", "eth0", "up" if up else "down")


class Network:
    """A switch namespace with a bridge and hosts plugged into it; :meth:`close` removes all.

    Use as a context manager: the namespaces are deleted on exit even when the body failed.
    """

    def __init__(self) -> None:
        self.run_id = f"{PREFIX}{os.getpid()}-{secrets.token_hex(3)}-"
        self.hosts: dict[str, Host] = {}
        self._netns: list[str] = []
        self.switch = self._add_netns("sw")
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")

    def _add_netns(self, suffix: str) -> str:
        name = self.run_id + suffix
        _ip("netns", "add", name)
        self._netns.append(name)
        _ip("-n", name, "link", "set", "lo", "up")
        return name

    def add_host(self, name: str, number: int) -> Host:
        """A host ``name`` at ``SUBNET.<number>``, cabled to the switch."""
        netns = self._add_netns(name)
        port = f"p{number}"  # the switch side; names are private to the switch namespace
        _ip("-n", self.switch, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", netns)
        _ip("-n", self.switch, "link", "set", port, "master", "br0")
        _ip("-n", self.switch, "link", "set", port, "up")
        addr = f"{SUBNET}.{number}"
        _ip("-n", netns, "addr", "add", f"{addr}/24", "dev", "eth0")
        _ip("-n", netns, "link", "set", "eth0", "up")
        host = Host(name, netns, addr)
        self.hosts[name] = host
        return host

    def close(self) -> None:
        for host in self.hosts.values():
            for proc in host.procs:
                if proc.poll() is None:
                    proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(10)
        for name in reversed(self._netns):
            _delete_netns(name)
        self._netns.clear()

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def wait_for_tcp(host: Host, port: int, timeout: float = 60.0) -> None:
    """Wait until something on ``host`` accepts TCP on ``port`` (checked from inside its namespace).

    The probe is bash's ``/dev/tcp`` (a connect, then close), not a Python interpreter: a probe
    per 0.2 s was a Python start-up each (tens of ms of CPU, seconds of wall on a loaded machine)."""
    probe = ["timeout", "5", "bash", "-c", f"exec 3<>/dev/tcp/{host.addr}/{port}"]
    deadline = time.monotonic() + timeout
    while True:
        res = subprocess.run(host.argv(probe), capture_output=True, timeout=30)
        if res.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"nothing listens on {host.addr}:{port} ({host.name}) after {timeout}s")
        time.sleep(0.2)


def wait_until(predicate, timeout: float, what: str, interval: float = 0.1) -> None:
    """Poll ``predicate`` until true; fail naming ``what`` (a hang guard, never a timing goal)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached within {timeout}s")
        time.sleep(interval)


def log_path(root: Path, name: str) -> Path:
    return root / f"{name}.log"
