"""The multi-host cluster: storage, service and two compute nodes, as an importable builder.

Why a module of its own: tests/multihost's fixtures and the chaos soak (bench/soak) build
the same hosts; one builder keeps them the same. See tests/multihost/conftest.py for what
runs where, and docs/architecture.md ("Testing across hosts").

- storage (10.213.0.10): moto in server mode, bucket ``data`` (the origin the datasets
  point at; moto's request log is the origin GET count), and a tiny Ceph (one mon, one
  memstore OSD, started by scripts/ceph-dev/ceph-up.sh inside this namespace with
  ``CEPH_ADDR`` = its address, so it is reachable only over the test network) whose pool
  ``cache`` is the compute nodes' shared tier (``cache.shared_url = rados://cache/pool``).
  The nodes hold only a ``client.datahub`` key limited to that pool.
- service (10.213.0.20): ``datahub serve --auth`` over a SQLite catalog only it opens.
- a (10.213.0.31) and b (10.213.0.32): each its own home (RAM + disk cache) and its own
  ``datahub mount`` daemon, with ``catalog_url = http://10.213.0.20:8080`` and a token.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from datahub.config import load_config
from fuse_adapter.daemon import is_mounted, read_record
from tests.moto_launch import MOTO_SERVER
from tests.multihost.netns import Host, Network, clean_leftovers, wait_for_tcp, wait_until
from tests.zygote import ZygoteProcess

S3_PORT = 5000
API_PORT = 8080
ORIGIN_BUCKET = "data"
RADOS_POOL = "cache"
SHARED_URL = f"rados://{RADOS_POOL}/pool"
CEPH_UP = Path(__file__).resolve().parents[2] / "scripts" / "ceph-dev"
KEY = "testing"
DATAHUB = [str(Path(sys.executable).with_name("datahub"))]
FUSE = [sys.executable, "-m", "fuse_adapter"]  # the datahub CLI with mount/umount (datahub's pyfuse3)
#: what ``python -m`` runs for a node's ``datahub ARGS`` (``Node.cli``): the console script's
#: ``main`` (``datahub``), or the CLI with mount/umount (``FUSE``)
CLI_MODULE = "datahub.cli.main"
FUSE_MODULE = "fuse_adapter"


@dataclass
class Node:
    """A compute node: its host, home and config; runs the datahub CLI and mounts there."""

    host: Host
    root: Path
    config_path: Path
    env: dict

    def cli_argv(self, *args: str) -> list[str]:
        """The command line of ``datahub ARGS`` with this node's config."""
        prog = FUSE if args[0] in ("mount", "umount") else DATAHUB
        return [*prog, "--config", str(self.config_path), *args]

    def cli(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        """``datahub ARGS`` with this node's config, on its host: a fork of this process's
        pre-imported zygote that joins the host's network (``Host.run_module``); the tests
        here test what the command does across hosts, not the console script's start."""
        module = FUSE_MODULE if args[0] in ("mount", "umount") else CLI_MODULE
        argv = ["--config", str(self.config_path), *args]
        return self.host.run_module(module, argv, env=self.env, timeout=timeout, check=check)

    def popen_cli(self, *args: str, log: IO[bytes]) -> subprocess.Popen | ZygoteProcess:
        """``datahub ARGS`` with this node's config started on its host (output to ``log``), a
        zygote fork as ``cli``'s; killed when the network is torn down."""
        module = FUSE_MODULE if args[0] in ("mount", "umount") else CLI_MODULE
        return self.host.popen_module(
            module, ["--config", str(self.config_path), *args], log=log, env=self.env
        )

    @contextlib.contextmanager
    def mounted(self, mountpoint: Path, *sources: str) -> Iterator[subprocess.Popen | ZygoteProcess]:
        """This node's own ``datahub mount`` daemon for the duration of the block; always unmounted."""
        mountpoint.mkdir(parents=True, exist_ok=True)
        log = open(self.root / f"mount-{mountpoint.name}.log", "ab")  # noqa: SIM115 - closed below
        argv = ["--config", str(self.config_path), "mount", str(mountpoint), *sources, "--foreground"]
        proc = self.host.popen_module(FUSE_MODULE, argv, log=log, env=self.env)  # a zygote fork
        try:
            # ready as `--background` is: mounted AND its record written (tests/fuse/conftest.py)
            home = load_config(self.config_path, env=self.env).home_path
            wait_until(
                lambda: (
                    (is_mounted(str(mountpoint)) and read_record(home, str(mountpoint)))
                    or proc.poll() is not None
                ),
                60,
                "mount ready",
            )
            if proc.poll() is not None:
                raise AssertionError(f"mount on {self.host.name} exited {proc.returncode}: {log.name}")
            yield proc
        finally:
            if proc.poll() is None:
                self.cli("umount", str(mountpoint), check=False, timeout=60)
            if is_mounted(str(mountpoint)):
                subprocess.run(["fusermount3", "-uz", str(mountpoint)], check=False)
            if proc.poll() is None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(20)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()


@dataclass
class Cluster:
    net: Network
    root: Path
    storage: Host
    service: Host
    a: Node
    b: Node
    moto_log: Path
    ceph_env: dict
    token: str
    serve_args: list[str]  # ``datahub ARGS`` of the service (``serve ...``)
    serve_env: dict
    serve_proc: subprocess.Popen | ZygoteProcess | None = None

    def start_service(self) -> None:
        """Start ``datahub serve`` on the service host and wait until it accepts connections."""
        log = open(self.root / "service.log", "ab")  # noqa: SIM115 - lives as long as the process
        self.serve_proc = self.service.popen_module(CLI_MODULE, self.serve_args, log=log, env=self.serve_env)
        wait_for_tcp(self.service, API_PORT)

    def kill_service(self) -> None:
        """kill -9 the API server (a crashed or rebooting service host)."""
        assert self.serve_proc is not None
        self.serve_proc.kill()
        self.serve_proc.wait(30)

    def s3(self, code: str) -> str:
        """Run boto3 ``code`` on the storage host (``s3`` is a client of its moto); returns stdout."""
        prelude = (
            "import boto3\n"
            f"s3 = boto3.client('s3', endpoint_url='http://{self.storage.addr}:{S3_PORT}', "
            f"aws_access_key_id='{KEY}', aws_secret_access_key='{KEY}', region_name='us-east-1')\n"
        )
        return self.storage.run_module("-c", [prelude + code]).stdout

    def origin_gets(self) -> int:
        """GETs of objects in the origin bucket, as moto logged them (counted at the server; a
        206 line is wrapped in colour codes, and every one-page read is a range since shortrec15)."""
        pattern = re.compile(rf"GET /{ORIGIN_BUCKET}/[^? ]+\S* HTTP/1\.[01]")
        return len(pattern.findall(self.moto_log.read_text(errors="replace")))

    def rados_reads(self) -> int:
        """Read ops the storage host's OSD has served (its ``op_r`` counter, via the admin socket)."""
        out = self.storage.run(
            ["ceph", "daemon", "osd.0", "perf", "dump"], env=self.ceph_env, timeout=60
        ).stdout
        return int(json.loads(out)["osd"]["op_r"])

    def shared_pages(self) -> int:
        """Pages in the shared tier: RADOS objects ``pool/pages/*`` in the pool, listed on the storage host."""
        out = self.storage.run(["rados", "-p", RADOS_POOL, "ls"], env=self.ceph_env, timeout=60).stdout
        return sum(1 for name in out.split() if name.startswith("pool/pages/"))


def _node_config(root: Path, storage: Host, service: Host, s3_port: int, home: Path | None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    path = root / "datahub.toml"
    path.write_text(
        f'home = "{home or root / "var"}"\n'
        f'catalog_url = "http://{service.addr}:{API_PORT}"\n'
        f'objects_url = "s3://{ORIGIN_BUCKET}/objects/{root.name}"\n'
        "[s3]\n"
        f'endpoint_url = "http://{storage.addr}:{s3_port}"\n'
        f'access_key_id = "{KEY}"\n'
        f'secret_access_key = "{KEY}"\n'
        'region = "us-east-1"\n'
        "path_style = true\n"
        "max_attempts = 2\n"
        "connect_timeout = 2.0\n"
        "read_timeout = 3.0\n"
        "total_timeout = 6.0\n"
        "[cache]\n"
        "ram_bytes = 33554432\n"
        "disk_bytes = 268435456\n"
        f'shared_url = "{SHARED_URL}"\n'
        "shared_bytes = 1073741824\n"
        "flush_interval = 3600.0\n"
    )
    return path


def _read_exports(path: Path) -> dict[str, str]:
    return {
        name: value
        for line in path.read_text().splitlines()
        if line.startswith("export ")
        for name, _, value in [line[len("export ") :].partition("=")]
    }


@contextlib.contextmanager
def ceph_on(storage: Host, root: Path) -> Iterator[tuple[dict, dict]]:
    """A Ceph (mon + memstore OSD, pool ``cache``) on the storage host, stopped on exit.

    Yields (admin env on the storage host, client env of the compute nodes). The nodes get a
    ceph.conf naming the mon at the storage host's address, a ``client.datahub`` key limited
    to the pool, and op timeouts of 3 s (a node cut off fails over to the origin, then EIO).
    """
    ceph_dir = root / "ceph"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CEPH_")}
    env.update(CEPH_ADDR=storage.addr, CEPH_POOL=RADOS_POOL, CEPH_WITH_MGR="0", CEPH_WITH_RGW="0")
    up_log = root / "ceph-up.log"
    try:
        with open(up_log, "wb") as out:  # a file, not a pipe: the daemons outlive the script
            # packages first, from the root namespace: apt cannot reach out from the storage host
            subprocess.run(
                ["bash", str(CEPH_UP / "ceph-up.sh"), str(ceph_dir)],
                env={**env, "CEPH_INSTALL_ONLY": "1"},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=600,
                check=True,
            )
            res = subprocess.run(
                storage.argv(["bash", str(CEPH_UP / "ceph-up.sh"), str(ceph_dir)]),
                env={**env, "CEPH_NO_INSTALL": "1"},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=600,
            )
        if res.returncode != 0:
            tail = up_log.read_text(errors="replace")[-3000:]
            raise AssertionError(f"ceph-up.sh on the storage host exited {res.returncode}:\n{tail}")
        exports = _read_exports(ceph_dir / "env.sh")
        admin = {k: v for k, v in os.environ.items() if not k.startswith("CEPH_")}
        admin.update(CEPH_CONF=exports["CEPH_CONF"], CEPH_KEYRING=exports["CEPH_KEYRING"])
        keyring = root / "ceph.client.datahub.keyring"
        storage.run(
            ["ceph", "auth", "get-or-create", "client.datahub", "mon", "allow r", "osd",
             f"allow rwx pool={RADOS_POOL}", "-o", str(keyring)],
            env=admin,
            timeout=60,
        )  # fmt: skip
        mon_host = re.search(r"^mon host = (.+)$", (ceph_dir / "ceph.conf").read_text(), re.M).group(1)
        client_conf = root / "ceph-client.conf"
        client_conf.write_text(
            "[global]\n"
            f"mon host = {mon_host}\n"
            f"keyring = {keyring}\n"
            "rados osd op timeout = 3\n"
            "rados mon op timeout = 3\n"
            "client mount timeout = 10\n"
            f"log file = {root / 'ceph-client.log'}\n"
        )
        pylib = exports["CEPH_PYLIB"]  # Debian's python3-rados for the venv's CPython 3.11
        client = {
            "CEPH_CONF": str(client_conf),
            "CEPH_ARGS": "--id datahub",
            "PYTHONPATH": os.pathsep.join(p for p in (pylib, os.environ.get("PYTHONPATH", "")) if p),
        }
        yield admin, client
    finally:
        subprocess.run(
            ["bash", str(CEPH_UP / "ceph-down.sh"), str(ceph_dir), "--kill"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=120,
        )


@contextlib.contextmanager
def build_cluster(
    root: Path,
    *,
    moto_bind: str = "",
    node_s3_port: int = S3_PORT,
    node_home: Callable[[str], Path] | None = None,
    service_home: Path | None = None,
) -> Iterator[Cluster]:
    """Build the four hosts under ``root``; everything is stopped and deleted on exit.

    ``moto_bind``: the address moto listens on in the storage namespace (default its test
    address; ``0.0.0.0`` also serves its loopback, where a fault proxy can reach it).
    ``node_s3_port``: the port the compute nodes use on the storage host (a proxy's);
    setup calls (imports on a node) go through it too. ``node_home(name)``: a compute
    node's home directory (default ``<root>/<name>/var``). ``service_home``: the service's
    (its SQLite catalog; default ``<root>/service``).
    """
    clean_leftovers()
    with Network() as net, contextlib.ExitStack() as stack:
        storage = net.add_host("storage", 10)
        service = net.add_host("service", 20)
        host_a = net.add_host("a", 31)
        host_b = net.add_host("b", 32)

        moto_log = root / "moto.log"
        bind = moto_bind or storage.addr
        storage.popen([*MOTO_SERVER, "-H", bind, "-p", str(S3_PORT)], log=open(moto_log, "ab"))  # noqa: SIM115
        ceph_admin, ceph_client = stack.enter_context(ceph_on(storage, root))
        wait_for_tcp(storage, S3_PORT)

        svc_home = service_home or root / "service"
        svc_env = {k: v for k, v in os.environ.items() if not k.startswith("DATAHUB_")}
        svc_cli = ["--home", str(svc_home)]  # ``datahub`` run as CLI_MODULE (``Host.run_module``)
        service.run_module(CLI_MODULE, [*svc_cli, "init"], env=svc_env)
        out = service.run_module(
            CLI_MODULE, [*svc_cli, "token", "create", "--principal", "cluster", "--admin"], env=svc_env
        ).stdout
        token = re.search(r"dh_[A-Za-z0-9_\-]+", out).group(0)
        serve = [*svc_cli, "serve", "--auth", "--host", service.addr, "--port", str(API_PORT), "--no-labelx"]

        node_env = {k: v for k, v in os.environ.items() if not k.startswith(("DATAHUB_", "CEPH_"))}
        node_env.update(ceph_client, DATAHUB_API_TOKEN=token)
        nodes = []
        for h in (host_a, host_b):
            home = node_home(h.name) if node_home else None
            conf = _node_config(root / h.name, storage, service, node_s3_port, home)
            nodes.append(Node(h, root / h.name, conf, node_env))
        c = Cluster(
            net, root, storage, service, nodes[0], nodes[1], moto_log, ceph_admin, token, serve, svc_env
        )
        c.start_service()
        c.s3(f"s3.create_bucket(Bucket='{ORIGIN_BUCKET}')")
        yield c


def upload(cluster: Cluster, prefix: str, objs: dict[str, bytes]) -> None:
    """Put ``objs`` under ``s3://data/<prefix>/`` from the storage host (straight to moto)."""
    upload_all(cluster, {prefix: objs})


def upload_all(cluster: Cluster, by_prefix: dict[str, dict[str, bytes]]) -> None:
    """Put each prefix's objects under ``s3://data/<prefix>/``, all in one boto3 process on
    the storage host (a process of its own costs ~1 CPU-s: boto3's import and its client)."""
    pairs = []
    for prefix, objs in by_prefix.items():
        src = cluster.root / f"src-{prefix}"
        for key, data in objs.items():
            (src / key).parent.mkdir(parents=True, exist_ok=True)
            (src / key).write_bytes(data)
        pairs.append((str(src), prefix))
    cluster.s3(
        "import pathlib\n"
        f"for src, prefix in {pairs!r}:\n"
        "    src = pathlib.Path(src)\n"
        "    for p in sorted(src.rglob('*')):\n"
        "        if p.is_file():\n"
        f"            s3.put_object(Bucket='{ORIGIN_BUCKET}', Key=prefix + '/' + p.relative_to(src).as_posix(), "
        "Body=p.read_bytes())\n"
    )
