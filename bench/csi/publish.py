"""CSI driver costs, beside the same FUSE daemon mounted directly (the baseline, same run).

    .venv/bin/python bench/csi/publish.py [--files 2000] [--big-mib 64] [--reps 3]

Measures, on a moto S3 server on 127.0.0.1 (root + /dev/fuse needed):
  * time to a served mount: NodePublishVolume (resolve + mount process + bind) vs
    ``python -m fuse_adapter mount --background`` of the same version;
  * unmount: NodeUnpublishVolume vs ``python -m fuse_adapter umount``;
  * a cold sequential read of a large file through the CSI target (bind mount) vs
    through the direct mount (a different object of the same size each time: cold both);
  * recovery: kill -9 of a mount process until the target serves again (supervisor);
    kill -9 of the plugin and its mount processes until a restarted plugin serves again.
Prints a table of medians and ratios; copy it to docs/benchmarks/csi.md.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.csi.conftest import CsiEnv, Plugin, make_env, wait_until  # noqa: E402
from tests.servers import MotoServer  # noqa: E402


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def read_all(path: Path) -> int:
    total = 0
    with open(path, "rb", buffering=0) as fh:
        while chunk := fh.read(1 << 20):
            total += len(chunk)
    return total


def fuse_cli(env: CsiEnv, *args: str) -> None:
    cmd = [sys.executable, "-m", "fuse_adapter", "--config", str(env.config_path), *args]
    subprocess.run(cmd, check=True, capture_output=True, cwd=REPO)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--big-mib", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    moto = MotoServer(keep_alive=True)
    root = Path(tempfile.mkdtemp(prefix="bench-csi-"))
    plugin: Plugin | None = None
    try:
        env = make_env(root / "env", moto.endpoint)
        big = args.big_mib * 1024**2
        objects = {f"small/{i:05d}.bin": os.urandom(2048) for i in range(args.files)}
        objects |= {f"big/{i}.bin": os.urandom(big) for i in range(2 * args.reps)}
        seq = env.commit("bench", objects)
        plugin = Plugin(root / "plugin", env.config_path, check_interval=0.2, kubelet_dir=root)
        (root / "plugin").mkdir()
        plugin.start()
        rows: dict[str, list[float]] = {}

        def add(name: str, value: float) -> None:
            rows.setdefault(name, []).append(value)

        for rep in range(args.reps):
            # --- baseline: the daemon mounted directly ---------------------------------------
            mnt = root / f"direct{rep}"
            mnt.mkdir()
            add(
                "mount: direct (fuse_adapter --background)",
                timed(lambda m=mnt: fuse_cli(env, "mount", str(m), f"bench@{seq}", "--background")),
            )
            f = mnt / "bench" / f"v{seq}" / "big" / f"{2 * rep}.bin"
            add("cold read MiB/s: direct mount", args.big_mib / timed(lambda f=f: read_all(f)))
            add("unmount: direct (fuse_adapter umount)", timed(lambda m=mnt: fuse_cli(env, "umount", str(m))))
            # --- the CSI plugin ------------------------------------------------------------------
            target = str(root / "pods" / str(rep) / "mount")
            Path(target).parent.mkdir(parents=True)
            ctx = {"dataset": "bench", "version": "latest"}
            add(
                "mount: NodePublishVolume",
                timed(lambda t=target, c=ctx, v=f"b{rep}": plugin.publish(t, c, volume_id=v)),
            )
            f = Path(target) / "big" / f"{2 * rep + 1}.bin"
            add("cold read MiB/s: CSI target (bind)", args.big_mib / timed(lambda f=f: read_all(f)))
            # same state as the direct mount at its unmount: it has just read one big file
            add("unmount: NodeUnpublishVolume", timed(lambda t=target, v=f"b{rep}": plugin.unpublish(t, v)))
            # --- recovery of a killed mount process (supervisor, 0.2 s checks) -----------------
            plugin.publish(target, ctx, volume_id=f"k{rep}")
            [rec] = [p for p in plugin.state() if p["target_path"] == target]
            os.kill(rec["pid"], signal.SIGKILL)
            start = time.perf_counter()
            wait_until(lambda t=target: _serves(Path(t)), 120, "remount")
            add("recovery: kill -9 mount process -> serving", time.perf_counter() - start)
            plugin.unpublish(target, f"k{rep}")
        # --- restart of the plugin with two published targets --------------------------------
        for rep in range(args.reps):
            targets = []
            for i in range(2):
                target = str(root / "pods" / f"r{rep}-{i}" / "mount")
                Path(target).parent.mkdir(parents=True)
                plugin.publish(target, {"dataset": "bench", "version": str(seq)}, volume_id=f"r{rep}-{i}")
                targets.append(target)
            pids = [p["pid"] for p in plugin.state()]
            plugin.kill9()
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            start = time.perf_counter()
            restarted = Plugin(plugin.root, plugin.config_path, check_interval=3600, kubelet_dir=root).start()
            assert all(_serves(Path(t)) for t in targets)
            add("recovery: plugin restart, 2 broken targets -> ready + serving", time.perf_counter() - start)
            plugin.proc, plugin.channel = restarted.proc, restarted.channel
            for i, t in enumerate(targets):
                plugin.unpublish(t, f"r{rep}-{i}")
        print(f"{args.files} small files + {args.big_mib} MiB objects, {args.reps} reps, medians (min-max)")
        print(f"{'measure':62} {'median':>9} {'range':>17}")
        for name, values in rows.items():
            print(f"{name:62} {statistics.median(values):9.2f} {min(values):8.2f}-{max(values):<8.2f}")
        med = {k: statistics.median(v) for k, v in rows.items()}
        print(
            f"ratio mount CSI/direct: {med['mount: NodePublishVolume'] / med['mount: direct (fuse_adapter --background)']:.2f}"
        )
        print(
            f"ratio unmount CSI/direct: {med['unmount: NodeUnpublishVolume'] / med['unmount: direct (fuse_adapter umount)']:.2f}"
        )
        print(
            f"ratio read CSI/direct: {med['cold read MiB/s: CSI target (bind)'] / med['cold read MiB/s: direct mount']:.2f}"
        )
    finally:
        if plugin is not None:
            plugin.teardown()
        moto.stop()
    return 0


def _serves(target: Path) -> bool:
    try:
        return (target / "small" / "00000.bin").stat().st_size == 2048
    except OSError:
        return False


if __name__ == "__main__":
    sys.exit(main())
