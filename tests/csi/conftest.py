"""The CSI plugin as a real subprocess on a unix socket, and a gRPC client for it.

Like csi-sanity, tests talk to the plugin only over its socket. Published volumes are real
FUSE mounts (mount processes started by the plugin) bind-mounted onto temporary targets.
Teardown unpublishes every target the plugin recorded; then, as a safety net, detaches any
mount left under the test's own temp dir and kills mount processes the plugin recorded
there (never anything else).
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
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from csi.node import CHECK_DONE
from csi.proto_gen import csi_pb2 as pb
from csi.proto_gen import csi_pb2_grpc as rpc
from datahub.catalog import open_catalog
from datahub.catalog.model import Put, Record
from datahub.config import Config, load_config
from datahub.storage import StoreRegistry
from tests import zygote
from tests.servers import S3Endpoint, free_port, wait_for_port

REPO = Path(__file__).resolve().parents[2]
NODE_ID = "test-node"
START_TIMEOUT = 60.0
STOP_GRACE = 30.0  # seconds from SIGTERM to the abort that dumps the stacks

Mode = pb.VolumeCapability.AccessMode.Mode


def wait_until(predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached within {timeout}s")
        time.sleep(interval)


def capability(mode: int = Mode.SINGLE_NODE_WRITER, *, block: bool = False) -> pb.VolumeCapability:
    cap = pb.VolumeCapability(access_mode=pb.VolumeCapability.AccessMode(mode=mode))
    if block:
        cap.block.SetInParent()
    else:
        cap.mount.SetInParent()
    return cap


def mounts_under(root: Path) -> list[str]:
    """Mount points below ``root`` (from /proc/self/mountinfo), deepest first."""
    prefix = str(root) + "/"
    with open("/proc/self/mountinfo") as fh:
        points = [line.split()[4].replace("\\040", " ") for line in fh]
    return sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True)


@dataclass
class CsiEnv:
    """A datahub home whose objects live in a fresh S3 bucket, plus a dataset to publish."""

    root: Path
    config_path: Path
    config: Config
    bucket: str
    endpoint: S3Endpoint
    files: dict[int, dict[str, bytes]] = field(default_factory=dict)  # version -> key -> bytes

    def target(self, name: str) -> str:
        """A target path the CO would hand us: its parent exists, the target itself may not."""
        parent = self.root / "pods" / name
        parent.mkdir(parents=True, exist_ok=True)
        return str(parent / "mount")

    def commit(self, dataset: str, objects: dict[str, bytes]) -> int:
        """Commit ``objects`` (uploaded under a fresh prefix: committed objects are never overwritten)."""
        with StoreRegistry(self.config) as stores:
            store = stores.store(f"s3://{self.bucket}/data-{uuid.uuid4().hex[:8]}")
            changes = []
            for key, data in sorted(objects.items()):
                info = store.put(key, data)
                changes.append(Put(Record(key, store.url_for(key), info.etag, len(data))))
        catalog = open_catalog(self.config.resolved_catalog_url)
        try:
            with contextlib.suppress(Exception):
                catalog.create_dataset(dataset)
            return catalog.commit(dataset, changes, message="test").seq
        finally:
            catalog.close()


def write_config(root: Path, endpoint: S3Endpoint, bucket: str, *, endpoint_url: str | None = None) -> Path:
    path = root / "datahub.toml"
    path.write_text(
        f'home = "{root / "var"}"\n'
        f'objects_url = "s3://{bucket}/objects"\n'
        "[s3]\n"
        f'endpoint_url = "{endpoint_url or endpoint.url}"\n'
        f'access_key_id = "{endpoint.access_key}"\n'
        f'secret_access_key = "{endpoint.secret_key}"\n'
        'region = "us-east-1"\n'
        "max_attempts = 2\n"
        "[cache]\n"
        "ram_bytes = 33554432\n"
        "flush_interval = 3600.0\n"
    )
    return path


def make_env(root: Path, endpoint: S3Endpoint) -> CsiEnv:
    root.mkdir(parents=True, exist_ok=True)
    bucket = endpoint.new_bucket("csi")
    config_path = write_config(root, endpoint, bucket)
    env = CsiEnv(root, config_path, load_config(config_path, env={}), bucket, endpoint)
    v1 = {
        "train/a.bin": os.urandom(300_000),
        "train/b.bin": b"bee" * 1000,
        "val/c.txt": b"see\n",
        "README": b"v1\n",
    }
    v2 = {**v1, "README": b"v2\n", "train/d.bin": os.urandom(5000)}
    env.files[env.commit("imgs", v1)] = v1
    env.files[env.commit("imgs", {"README": v2["README"], "train/d.bin": v2["train/d.bin"]})] = v2
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        catalog.tag("imgs", "stable", 1)
    finally:
        catalog.close()
    return env


class Plugin:
    """``python -m csi`` on a unix socket, with the three gRPC stubs.

    Its ``--kubelet-dir`` is ``kubelet_dir``, else this session's base temp dir (set for every
    test under tests/csi by ``_kubelet_dir``), else ``root``: every test's targets and staging
    paths live in its temp dirs, as the kubelet's live under its dir."""

    default_kubelet_dir: Path | None = None

    def __init__(
        self,
        root: Path,
        config_path: Path,
        *,
        check_interval: float = 0.5,
        env: dict[str, str] | None = None,
        mode: str = "all",
        umask: int = -1,
        kubelet_dir: Path | None = None,
    ) -> None:
        self.kubelet_dir = kubelet_dir or Plugin.default_kubelet_dir or root
        self.umask = umask  # the plugin's umask (-1: ours)
        self.env = env or {}  # the plugin's own environment (its Secret's variables), on top of none of ours
        self.mode = mode  # --mode: node, controller or all
        self.root = root
        self.config_path = config_path
        self.socket = root / "csi.sock"
        self.state_dir = root / "state"
        self.log_path = root / "plugin.log"
        self.check_interval = check_interval
        self.proc: subprocess.Popen | zygote.ZygoteProcess | None = None
        self.channel: grpc.Channel | None = None

    def start(self) -> Plugin:
        # tests.csi.plugin_main: ``python -X faulthandler -m csi`` with the plugin's umask, as a
        # fork of the worker's zygote (tests/zygote.py): faulthandler makes a plugin that does not
        # stop on SIGTERM write its threads' stacks to its log when stop() aborts it (the plugin
        # alone: its mount processes do not inherit it)
        cmd = [sys.executable, "-m", "tests.csi.plugin_main", str(self.umask)]
        cmd += ["--endpoint", f"unix://{self.socket}"]
        cmd += ["--node-id", NODE_ID]
        cmd += ["--state-dir", str(self.state_dir), "--config", str(self.config_path)]
        cmd += ["--check-interval", str(self.check_interval), "--mount-timeout", "90", "--mode", self.mode]
        cmd += ["--unmount-timeout", "120", "-v"]  # -v: tests wait for supervisor passes (CHECK_DONE)
        cmd += ["--kubelet-dir", str(self.kubelet_dir)]
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("DATAHUB_")}, **self.env}
        with open(self.log_path, "ab") as log:
            self.proc = zygote.popen(cmd, stdout=log.fileno(), stderr=log.fileno(), cwd=REPO, env=env)
        self.channel = grpc.insecure_channel(f"unix://{self.socket}")
        wait_until(self._ready, START_TIMEOUT, f"plugin ready (log: {self.log_path})", interval=0.1)
        return self

    def _ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"plugin exited {self.proc.returncode}: {self.log_path.read_text()[-2000:]}")
        if not self.socket.exists():
            return False
        try:
            return self.identity.Probe(pb.ProbeRequest(), timeout=5).ready.value
        except grpc.RpcError:
            return False

    @property
    def identity(self) -> rpc.IdentityStub:
        return rpc.IdentityStub(self.channel)

    @property
    def node(self) -> rpc.NodeStub:
        return rpc.NodeStub(self.channel)

    @property
    def controller(self) -> rpc.ControllerStub:
        return rpc.ControllerStub(self.channel)

    def state(self) -> list[dict]:
        try:
            return json.loads((self.state_dir / "published.json").read_text())["published"]
        except FileNotFoundError:
            return []

    def publish(
        self,
        target: str,
        context: dict[str, str],
        *,
        volume_id: str = "vol-1",
        readonly: bool = False,
        mode: int = Mode.SINGLE_NODE_WRITER,
        secrets: dict[str, str] | None = None,
        staging: str = "",
    ) -> pb.NodePublishVolumeResponse:
        request = pb.NodePublishVolumeRequest(
            volume_id=volume_id,
            target_path=target,
            volume_capability=capability(mode),
            readonly=readonly,
            volume_context=context,
            secrets=secrets or {},
            staging_target_path=staging,
        )
        return self._call(self.node.NodePublishVolume, request, 180)

    def stage(
        self,
        staging: str,
        context: dict[str, str],
        *,
        volume_id: str = "vol-1",
        mode: int = Mode.SINGLE_NODE_WRITER,
        secrets: dict[str, str] | None = None,
    ) -> pb.NodeStageVolumeResponse:
        request = pb.NodeStageVolumeRequest(
            volume_id=volume_id,
            staging_target_path=staging,
            volume_capability=capability(mode),
            volume_context=context,
            secrets=secrets or {},
        )
        return self._call(self.node.NodeStageVolume, request, 180)

    def stats(self, path: str, volume_id: str = "vol-1") -> pb.NodeGetVolumeStatsResponse:
        request = pb.NodeGetVolumeStatsRequest(volume_id=volume_id, volume_path=path)
        return self.node.NodeGetVolumeStats(request, timeout=30)

    def unstage(self, staging: str, volume_id: str = "vol-1") -> pb.NodeUnstageVolumeResponse:
        request = pb.NodeUnstageVolumeRequest(volume_id=volume_id, staging_target_path=staging)
        return self._call(self.node.NodeUnstageVolume, request, 300)

    def unpublish(self, target: str, volume_id: str = "vol-1") -> pb.NodeUnpublishVolumeResponse:
        request = pb.NodeUnpublishVolumeRequest(volume_id=volume_id, target_path=target)
        return self._call(self.node.NodeUnpublishVolume, request, 300)

    @staticmethod
    def _call(method, request, timeout: float):
        """Like a CO: ABORTED means another operation holds the target (e.g. the supervisor
        finishing a repair), so retry until it answers for real."""
        deadline = time.monotonic() + 60
        while True:
            try:
                return method(request, timeout=timeout)
            except grpc.RpcError as exc:
                if exc.code() != grpc.StatusCode.ABORTED or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        if self.channel is not None:
            self.channel.close()

    def stop(self) -> None:
        """SIGTERM, as the kubelet stops a plugin; one still running after 30 s (a kubelet's
        default grace period) is aborted, which makes it write every thread's stack to its log,
        and the run gets a warning naming the log: where it hung, for the next reader."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(STOP_GRACE)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGABRT)
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
                # the stacks themselves, not only the log's name: a run's temp dirs are gone
                # by the time someone reads the warning (pytest keeps the last three runs)
                stacks = self.log_path.read_text(errors="replace")[-6000:]
                warnings.warn(
                    f"the CSI plugin did not stop within {STOP_GRACE:.0f} s of SIGTERM; its "
                    f"threads' stacks when it was aborted ({self.log_path}):\n{stacks}",
                    stacklevel=2,
                )
        if self.channel is not None:
            self.channel.close()

    def unpublish_all(self) -> None:
        """Unpublish and unstage every volume the plugin recorded (targets before their stage),
        if it runs: what a test left, before the plugin is stopped or handed to the next test."""
        if self.proc is not None and self.proc.poll() is None:
            for p in sorted(self.state(), key=lambda p: bool(p.get("staged"))):  # targets before their stage
                with contextlib.suppress(grpc.RpcError):
                    if p.get("staged"):
                        self.unstage(p["target_path"], p["volume_id"])
                    else:
                        self.unpublish(p["target_path"], p["volume_id"])

    def teardown(self) -> None:
        """Unpublish what the plugin recorded, stop it, then clean up anything left (ours only)."""
        self.unpublish_all()
        leftover_pids = [p.get("pid", 0) for p in self.state()]
        self.stop()
        for pid in leftover_pids:
            if pid and _cmdline_mentions(pid, str(self.root)):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for point in mounts_under(self.root):
            subprocess.run(["umount", "-l", point], capture_output=True)


def _cmdline_mentions(pid: int, text: str) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return text.encode() in fh.read()
    except OSError:
        return False


@pytest.fixture(scope="session", autouse=True)
def _kubelet_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Every Plugin of tests/csi passes this session's base temp dir as ``--kubelet-dir``."""
    Plugin.default_kubelet_dir = tmp_path_factory.getbasetemp()


@pytest.fixture(scope="module")
def csi_env(tmp_path_factory: pytest.TempPathFactory, moto_endpoint: S3Endpoint) -> CsiEnv:
    return make_env(tmp_path_factory.mktemp("csi"), moto_endpoint)


@pytest.fixture(scope="module")
def plugin(csi_env: CsiEnv) -> Iterator[Plugin]:
    """One plugin for the module (restart tests start their own)."""
    p = Plugin(csi_env.root, csi_env.config_path)
    try:
        yield p.start()
    finally:
        p.teardown()


@contextlib.contextmanager
def serving_api(csi_env: CsiEnv, tmp_path: Path, *flags: str) -> Iterator[int]:
    """``datahub serve FLAGS`` over the environment's catalog on a loopback port (its output in
    ``tmp_path/serve.log``): the port, the server stopped at exit. A node plugin's catalog
    (``node_config``) in the tests of a plugin that is a client of the API."""
    port = free_port()
    environ = {k: v for k, v in os.environ.items() if not k.startswith("DATAHUB_")}
    environ["DATAHUB_CONFIG"] = str(csi_env.config_path)
    serve = [
        str(Path(sys.executable).with_name("datahub")),
        "serve",
        *flags,
        "--port",
        str(port),
        "--no-labelx",
    ]
    with open(tmp_path / "serve.log", "ab") as log:
        server = subprocess.Popen(serve, stdout=log, stderr=log, env=environ)
    try:
        wait_for_port(port)
        yield port
    finally:
        server.terminate()
        server.wait(30)


def node_config(csi_env: CsiEnv, tmp_path: Path, catalog_url: str) -> Path:
    """The environment's configuration for a node plugin of its own home whose catalog is
    ``catalog_url`` (``tmp_path/plugin.toml``)."""
    config_path = tmp_path / "plugin.toml"
    config_path.write_text(
        csi_env.config_path.read_text().replace(
            f'home = "{csi_env.root / "var"}"\n',
            f'home = "{tmp_path / "node"}"\ncatalog_url = "{catalog_url}"\n',
        )
    )
    return config_path


def handed_clean(plugin: Plugin) -> Iterator[Plugin]:
    """A module's plugin for one test, as a function fixture yields it (``yield from``): what the
    test left published is unpublished after it, so the next test starts with none, as with a
    plugin of its own. Why share: a plugin's start and stop is about 1.6 s of a worker at load
    12 (docs/benchmarks.md, suite15); a test that kills or restarts its plugin keeps its own."""
    yield plugin
    plugin.unpublish_all()


def wait_for_checks(plugin: Plugin, passes: int, timeout: float = 60.0) -> None:
    """Wait until the plugin's supervisor has completed ``passes`` more health checks."""

    def count() -> int:
        return plugin.log_path.read_text(errors="replace").count(CHECK_DONE)

    start = count()
    wait_until(lambda: count() >= start + passes, timeout, f"{passes} supervisor passes")
