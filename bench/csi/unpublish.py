"""Where a CSI workspace NodeUnpublishVolume spends its time, phase by phase, and an A/B of two trees.

    .venv/bin/python bench/csi/unpublish.py [--rounds 4] [--reps 3] [--base BASE_TREE]

Issue unpublish15. Each rep publishes a workspace volume with ``commitTo`` (NodePublishVolume,
inline: one mount process), writes 3 files of 64 KiB into the target, and unpublishes it
(NodeUnpublishVolume), on a moto S3 server on 127.0.0.1 (root + /dev/fuse needed). The node
service runs in a worker process (``NodeService`` in-process, no gRPC), whose phase functions
are wrapped with timers, so each phase is timed where the plugin calls it:

  * ``unmount target``: the pod's bind (``csi.mounts.unmount``);
  * ``stop mount process``: ``MountProcess.stop``; split at the moment the daemon exits (a
    watcher samples its /proc state every 2 ms) into ``stop: until the daemon exited`` (for the
    base: the ``datahub umount`` interpreter start, SIGTERM, the daemon's flush + commit +
    unmount) and ``stop: after the daemon exited`` (the base's umount re-opening the workspace:
    journal replay, writer lease, flush check, commit no-op; and its exit);
  * ``umount interpreter start`` (measured apart, each rep: ``python -m fuse_adapter umount``
    of a path that is not mounted: start, imports, configuration, nothing else);
  * ``wait_exit`` (reaping the daemon) and ``finish`` (``csi.finish.finish_workspace``: the
    plugin's own reopen: catalog, journal replay, lease, flush check, commit no-op).

CPU seconds: the worker's own (RUSAGE_SELF: the plugin's work) and its reaped children's
(RUSAGE_CHILDREN: the umount process during ``stop``; the daemon's whole life at ``wait_exit``).
With ``--base`` (another checkout, e.g. ``git archive BASE | tar -x -C /var/tmp/base``) each round
runs a worker from each tree, alternating which goes first; the worker and its mount processes
import the tree's code (checked: the path is printed). The machine is shared: the load average is
printed per round; compare CPU seconds and the phases that vanish, not wall ratios under load.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve()
REPO = HERE.parents[2]
FILE_BYTES = 64 * 1024


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


# --- the worker: one tree's NodeService ---------------------------------------------------------
class Phases:
    """Wall and CPU seconds of every wrapped call, by phase name, for the current rep."""

    def __init__(self) -> None:
        self.rep: dict[str, float] = {}

    def add(self, name: str, value: float) -> None:
        self.rep[name] = self.rep.get(name, 0.0) + value

    def wrap(self, owner: object, attr: str, name: str, around=None) -> None:
        original = getattr(owner, attr)

        def timed(*args, **kwargs):
            self_cpu = resource.getrusage(resource.RUSAGE_SELF)
            child_cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            try:
                with around(args) if around else contextlib.nullcontext():
                    return original(*args, **kwargs)
            finally:
                self.add(f"{name} wall", time.perf_counter() - start)
                after_self = resource.getrusage(resource.RUSAGE_SELF)
                after_child = resource.getrusage(resource.RUSAGE_CHILDREN)
                self.add(
                    f"{name} cpu self",
                    after_self.ru_utime + after_self.ru_stime - self_cpu.ru_utime - self_cpu.ru_stime,
                )
                self.add(
                    f"{name} cpu children",
                    after_child.ru_utime + after_child.ru_stime - child_cpu.ru_utime - child_cpu.ru_stime,
                )

        setattr(owner, attr, timed)


def _exited(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def worker(args: argparse.Namespace) -> None:
    sys.path.insert(0, os.getcwd())  # the tree under test (cwd), before anything else
    import csi
    from csi import mounts, node
    from csi.volumes import Capability
    from datahub.config import load_config

    print(f"# csi from {os.path.dirname(csi.__file__)}", file=sys.stderr)
    phases = Phases()
    daemon_pid = [0]

    @contextlib.contextmanager
    def watch_daemon(_args):
        """Stamp the moment the daemon exits while MountProcess.stop runs."""
        start, stamped, done = time.perf_counter(), [], threading.Event()

        def watch() -> None:
            while not done.is_set():
                if _exited(daemon_pid[0]):
                    stamped.append(time.perf_counter())
                    return
                time.sleep(0.002)

        thread = threading.Thread(target=watch, daemon=True)
        thread.start()
        try:
            yield
        finally:
            end = time.perf_counter()
            done.set()
            thread.join()
            exit_at = stamped[0] if stamped else end
            phases.add("stop: until the daemon exited wall", exit_at - start)
            phases.add("stop: after the daemon exited wall", end - exit_at)

    phases.wrap(mounts, "unmount", "unmount target")
    phases.wrap(mounts.MountProcess, "stop", "stop mount process", around=watch_daemon)
    phases.wrap(mounts, "wait_exit", "wait_exit")
    phases.wrap(node, "finish_workspace", "finish")
    config = load_config(args.config, env={})
    import inspect

    # the targets' dir as the kubelet's; a --base tree from before --kubelet-dir takes any target
    kubelet = {"kubelet_dir": Path(args.state).parent}
    if "kubelet_dir" not in inspect.signature(node.NodeService).parameters:
        kubelet = {}
    service = node.NodeService(config, Path(args.state), "bench", unmount_timeout=120.0, **kubelet)
    cap = Capability("mount", "SINGLE_NODE_WRITER")
    results = []
    for rep in range(args.reps):
        target = Path(args.state).parent / "pods" / f"{args.tag}-{rep}" / "mount"
        target.parent.mkdir(parents=True, exist_ok=True)
        context = {"workspace": f"ws-{args.tag}-{rep}", "commitTo": "out"}
        phases.rep = {}
        start = time.perf_counter()
        service.publish(node.PublishRequest(f"v-{args.tag}-{rep}", str(target), cap, context=context))
        phases.add("publish wall", time.perf_counter() - start)
        [record] = [p for p in service.published() if p.target_path == str(target)]
        daemon_pid[0] = record.pid
        for i in range(3):
            (target / f"f{i}.bin").write_bytes(os.urandom(FILE_BYTES))
        self_cpu = resource.getrusage(resource.RUSAGE_SELF)
        child_cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        service.unpublish(f"v-{args.tag}-{rep}", str(target))
        phases.add("unpublish wall", time.perf_counter() - start)
        s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        phases.add("unpublish cpu self", s.ru_utime + s.ru_stime - self_cpu.ru_utime - self_cpu.ru_stime)
        phases.add(
            "unpublish cpu children (umount + daemon's life)",
            c.ru_utime + c.ru_stime - child_cpu.ru_utime - child_cpu.ru_stime,
        )
        start = time.perf_counter()
        cmd = [
            sys.executable,
            "-m",
            "fuse_adapter",
            "--config",
            args.config,
            "umount",
            str(target.parent / "none"),
        ]
        subprocess.run(cmd, check=True, capture_output=True)
        phases.add("umount interpreter start (apart) wall", time.perf_counter() - start)
        results.append(phases.rep)
    print(json.dumps(results))


# --- the driver -----------------------------------------------------------------------------------
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--base", help="another checkout of the repository: A/B against it")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    ap.add_argument("--state", help=argparse.SUPPRESS)
    ap.add_argument("--tag", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return 0
    sys.path.insert(0, str(REPO))
    from datahub.catalog import open_catalog
    from tests.csi.conftest import write_config
    from tests.servers import MotoServer

    trees = {"head": REPO} | ({"base": Path(args.base).resolve()} if args.base else {})
    moto = MotoServer(keep_alive=True)
    root = Path(tempfile.mkdtemp(prefix="bench-unpublish-", dir="/var/tmp"))
    try:
        config = write_config(root, moto.endpoint, moto.endpoint.new_bucket("unpub"))
        from datahub.config import load_config

        catalog = open_catalog(load_config(config, env={}).resolved_catalog_url)
        catalog.create_dataset("out")
        catalog.close()
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
        for rnd in range(args.rounds):
            order = list(trees) if rnd % 2 == 0 else list(reversed(trees))
            print(f"round {rnd}: order {order}, load before {load()}", flush=True)
            for name in order:
                cmd = [
                    sys.executable,
                    str(HERE),
                    "--worker",
                    "--config",
                    str(config),
                    "--reps",
                    str(args.reps),
                ]
                cmd += ["--state", str(root / f"{name}{rnd}" / "state"), "--tag", f"{name}{rnd}"]
                proc = subprocess.run(cmd, cwd=trees[name], capture_output=True, text=True)
                if proc.returncode != 0:
                    raise SystemExit(f"{name} worker failed:\n{proc.stderr[-3000:]}")
                if rnd == 0:
                    print(f"  {name}: {proc.stderr.strip().splitlines()[0]}")
                runs[name] += json.loads(proc.stdout.strip().splitlines()[-1])
            print(f"round {rnd}: load after {load()}", flush=True)
        names = sorted({key for reps in runs.values() for rep in reps for key in rep})
        print(f"\n{args.rounds} rounds x {args.reps} reps per tree; medians (min-max), seconds")
        print(f"{'phase':58}" + "".join(f" {name:>22}" for name in trees))
        for key in names:
            row = f"{key:58}"
            for name in trees:
                values = [rep.get(key, 0.0) for rep in runs[name]]
                row += f" {statistics.median(values):7.3f} ({min(values):5.2f}-{max(values):5.2f})"
            print(row)
    finally:
        moto.stop()
        if root.as_posix() not in Path("/proc/self/mountinfo").read_text():
            shutil.rmtree(root, ignore_errors=True)  # never through a mount left behind
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
