"""The multi-host cluster for tests/multihost: storage, service and two compute nodes.

- storage (10.213.0.10): moto in server mode; its request log is the origin GET count.
  Two buckets: ``data`` (the origin the datasets point at) and ``shared`` (the shared
  cache tier, ``cache.shared_url = s3://shared/pool``), so a shared-tier read and an origin
  read are told apart by the bucket in the request line.
- service (10.213.0.20): ``datahub serve --auth`` over a SQLite catalog only it opens.
- a (10.213.0.31) and b (10.213.0.32): each its own home (RAM + disk cache) and its own
  ``datahub mount`` daemon, with ``catalog_url = http://10.213.0.20:8080`` and a token.

Skipped with the reason when ``ip netns`` cannot be used (not root, no iproute2).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fuse_adapter.daemon import is_mounted
from tests.multihost.netns import Host, Network, clean_leftovers, netns_refusal, wait_for_tcp, wait_until

S3_PORT = 5000
API_PORT = 8080
ORIGIN_BUCKET = "data"
SHARED_BUCKET = "shared"
KEY = "testing"
DATAHUB = [str(Path(sys.executable).with_name("datahub"))]
FUSE = [sys.executable, "-m", "fuse_adapter"]  # the datahub CLI with mount/umount (patched pyfuse3)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = None
    for item in items:
        if item.get_closest_marker("netns") is None:
            continue
        if reason is None:
            reason = netns_refusal() or ""
        if reason:
            item.add_marker(pytest.mark.skip(reason=f"netns: {reason}"))


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
        cmd = self.cli_argv(*args)
        return self.host.run(cmd, env=self.env, timeout=timeout, check=check)

    @contextlib.contextmanager
    def mounted(self, mountpoint: Path, *sources: str) -> Iterator[subprocess.Popen]:
        """This node's own ``datahub mount`` daemon for the duration of the block; always unmounted."""
        mountpoint.mkdir(parents=True, exist_ok=True)
        log = open(self.root / f"mount-{mountpoint.name}.log", "ab")  # noqa: SIM115 - closed below
        cmd = [*FUSE, "--config", str(self.config_path)]
        proc = self.host.popen(
            [*cmd, "mount", str(mountpoint), *sources, "--foreground"], log=log, env=self.env
        )
        try:
            wait_until(lambda: is_mounted(str(mountpoint)) or proc.poll() is not None, 60, "mount ready")
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
    token: str
    serve_cmd: list[str]
    serve_env: dict
    serve_proc: subprocess.Popen | None = None

    def start_service(self) -> None:
        """Start ``datahub serve`` on the service host and wait until it accepts connections."""
        log = open(self.root / "service.log", "ab")  # noqa: SIM115 - lives as long as the process
        self.serve_proc = self.service.popen(self.serve_cmd, log=log, env=self.serve_env)
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
        return self.storage.run([sys.executable, "-c", prelude + code]).stdout

    def origin_gets(self) -> int:
        """GETs of objects in the origin bucket, as moto logged them (counted at the server)."""
        pattern = re.compile(rf'"GET /{ORIGIN_BUCKET}/[^? ]+[^"]* HTTP/1\.[01]"')
        return len(pattern.findall(self.moto_log.read_text(errors="replace")))

    def shared_pages(self) -> int:
        out = self.s3(
            f"r = s3.list_objects_v2(Bucket='{SHARED_BUCKET}', Prefix='pool/pages/')\nprint(r.get('KeyCount', 0))"
        )
        return int(out.strip())


def _node_config(root: Path, storage: Host, service: Host) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    path = root / "datahub.toml"
    path.write_text(
        f'home = "{root / "var"}"\n'
        f'catalog_url = "http://{service.addr}:{API_PORT}"\n'
        f'objects_url = "s3://{ORIGIN_BUCKET}/objects/{root.name}"\n'
        "[s3]\n"
        f'endpoint_url = "http://{storage.addr}:{S3_PORT}"\n'
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
        f'shared_url = "s3://{SHARED_BUCKET}/pool"\n'
        "shared_bytes = 1073741824\n"
        "flush_interval = 3600.0\n"
    )
    return path


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    clean_leftovers()
    root = tmp_path_factory.mktemp("multihost")
    with Network() as net:
        storage = net.add_host("storage", 10)
        service = net.add_host("service", 20)
        host_a = net.add_host("a", 31)
        host_b = net.add_host("b", 32)

        moto_log = root / "moto.log"
        moto = Path(sys.executable).with_name("moto_server")
        storage.popen([str(moto), "-H", storage.addr, "-p", str(S3_PORT)], log=open(moto_log, "ab"))  # noqa: SIM115
        wait_for_tcp(storage, S3_PORT)

        svc_home = root / "service"
        svc_env = {k: v for k, v in os.environ.items() if not k.startswith("DATAHUB_")}
        svc_cli = [*DATAHUB, "--home", str(svc_home)]
        service.run([*svc_cli, "init"], env=svc_env)
        out = service.run(
            [*svc_cli, "token", "create", "--principal", "cluster", "--admin"], env=svc_env
        ).stdout
        token = re.search(r"dh_[A-Za-z0-9_\-]+", out).group(0)
        serve = [*svc_cli, "serve", "--auth", "--host", service.addr, "--port", str(API_PORT), "--no-labelx"]

        node_env = {k: v for k, v in os.environ.items() if not k.startswith("DATAHUB_")}
        node_env["DATAHUB_API_TOKEN"] = token
        nodes = [
            Node(h, root / h.name, _node_config(root / h.name, storage, service), node_env)
            for h in (host_a, host_b)
        ]
        c = Cluster(net, root, storage, service, nodes[0], nodes[1], moto_log, token, serve, svc_env)
        c.start_service()
        c.s3(f"s3.create_bucket(Bucket='{ORIGIN_BUCKET}')\ns3.create_bucket(Bucket='{SHARED_BUCKET}')")
        yield c
