"""Eight pods on one node publishing one dataset version: mount processes and their memory,
staged (NodeStageVolume once, eight bind mounts) against one mount process per target (a
NodePublishVolume without a staging path: the design before staging, still the path of
inline volumes), both measured in the same run by the same plugin.

    .venv/bin/python bench/csi/shared_daemon.py [--records 100000] [--per-dir 1000] [--pods 8] [--rounds 2]

On a moto S3 server on 127.0.0.1 (root + /dev/fuse needed). The version holds ``--records``
keys with synthetic URLs (never read: only listed and stat'ed) plus 64 real objects that every
pod reads and compares byte for byte. Each pod lists its root (which waits for the mount's
namespace), stats every entry (``os.walk``) and reads the real objects. Then it counts the
plugin's mount processes and sums their RSS and PSS (/proc/PID/smaps_rollup; PSS splits
shared library pages among processes, so it is the fairer sum for many daemons). The
baseline is one pod alone (one process per target). The namespace's share is the RSS above
what a process serving a 1-record version holds (measured too), times the process count. Configurations alternate per round; the
load average is printed with every row. Goal (issue 38): 1 process and <= 1.1x the memory.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from datahub.catalog import open_catalog  # noqa: E402
from datahub.catalog.model import Put, Record  # noqa: E402
from tests.csi.conftest import CsiEnv, Mode, Plugin, make_env  # noqa: E402
from tests.servers import MotoServer  # noqa: E402

REAL = 64


def load() -> str:
    return open("/proc/loadavg").read().split()[0]


def memory(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of a process, in bytes."""
    values = {}
    with open(f"/proc/{pid}/smaps_rollup") as fh:
        for line in fh:
            name, _, rest = line.partition(":")
            if name in ("Rss", "Pss"):
                values[name] = int(rest.split()[0]) * 1024
    return values["Rss"], values["Pss"]


def commit_version(env: CsiEnv, records: int, per_dir: int) -> tuple[int, dict[str, bytes]]:
    """A version of ``records`` synthetic keys plus REAL real objects (bytes returned)."""
    real = {f"real/{i:03d}.bin": os.urandom(4096 + i) for i in range(REAL)}
    seq = env.commit("shared", real)
    changes = [
        Put(
            Record(
                f"d{i // per_dir:05d}/f{i:07d}.jpg", f"s3://{env.bucket}/synthetic/{i}", f"e{i}", 1000 + i % 7
            )
        )
        for i in range(records)
    ]
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        seq = catalog.commit("shared", changes, message="synthetic").seq
    finally:
        catalog.close()
    return seq, real


def use(target: str, real: dict[str, bytes]) -> int:
    """What a training pod does first: list, stat everything, read some files (byte-exact)."""
    os.listdir(target)
    entries = 0
    for dirpath, dirs, files in os.walk(target):
        for name in files:
            os.stat(os.path.join(dirpath, name))
        entries += len(dirs) + len(files)
    for key, data in real.items():
        if Path(target, key).read_bytes() != data:
            raise AssertionError(f"{target}/{key}: wrong bytes")
    return entries


def run(
    plugin: Plugin, root: Path, name: str, pods: int, version: tuple[str, int, dict], staged: bool
) -> dict:
    dataset, seq, real = version
    context = {"dataset": dataset, "version": str(seq), "prefetch": "false"}
    targets = []
    stage = ""
    start = time.perf_counter()
    if staged:
        stage = str(root / "plugins" / name / "globalmount")
        Path(stage).mkdir(parents=True)
        plugin.stage(stage, context, volume_id=name, mode=Mode.MULTI_NODE_READER_ONLY)
    for i in range(pods):
        target = str(root / "pods" / f"{name}-{i}" / "mount")
        Path(target).parent.mkdir(parents=True)
        plugin.publish(target, context, volume_id=name if staged else f"{name}-{i}", staging=stage,
                       mode=Mode.MULTI_NODE_READER_ONLY)  # fmt: skip
        targets.append(target)
    entries = [use(t, real) for t in targets]
    elapsed = time.perf_counter() - start
    pids = sorted({p["pid"] for p in plugin.state() if p.get("pid")})
    rss, pss = (sum(v) for v in zip(*(memory(pid) for pid in pids), strict=True))
    for i, target in enumerate(targets):
        plugin.unpublish(target, name if staged else f"{name}-{i}")
    if staged:
        plugin.unstage(stage, name)
    if any(p for p in plugin.state()):
        raise AssertionError(f"{name}: records left behind")
    return {
        "daemons": len(pids),
        "rss": rss,
        "pss": pss,
        "entries": entries[0],
        "seconds": elapsed,
        "load": load(),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--per-dir", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    moto = MotoServer(keep_alive=True)
    root = Path(tempfile.mkdtemp(prefix="bench-csi-shared-"))
    plugin: Plugin | None = None
    try:
        env = make_env(root / "env", moto.endpoint)
        seq, real = commit_version(env, args.records, args.per_dir)
        tiny = {"one.bin": os.urandom(4096)}
        versions = {"big": ("shared", seq, real), "tiny": ("tiny", env.commit("tiny", tiny), tiny)}
        (root / "plugin").mkdir()
        plugin = Plugin(root / "plugin", env.config_path, check_interval=3600, kubelet_dir=root).start()
        configs = {
            "one pod, a 1-record version (process baseline)": (1, False, "tiny"),
            "one pod, one process (baseline)": (1, False, "big"),
            f"{args.pods} pods, a process per target (before staging)": (args.pods, False, "big"),
            f"{args.pods} pods, staged once (one process)": (args.pods, True, "big"),
        }
        rows: dict[str, list[dict]] = {c: [] for c in configs}
        for rnd in range(args.rounds):
            order = list(configs) if rnd % 2 == 0 else list(reversed(configs))  # alternate
            for i, config in enumerate(order):
                pods, staged, version = configs[config]
                rows[config].append(run(plugin, root, f"r{rnd}c{i}", pods, versions[version], staged))
        uname = subprocess.run(["uname", "-r"], capture_output=True, text=True).stdout.strip()
        print(f"version: {args.records:,} synthetic records ({args.per_dir} per dir) + {REAL} real objects; "
              f"{args.rounds} rounds, medians; kernel {uname}; {os.cpu_count()} CPUs")  # fmt: skip
        print(f"{'configuration':52} {'daemons':>7} {'RSS MiB':>8} {'PSS MiB':>8} {'entries/pod':>11} "
              f"{'s (publish+use)':>15} {'load':>12}")  # fmt: skip
        med = {}
        for config, runs in rows.items():
            m = {k: statistics.median(r[k] for r in runs) for k in ("daemons", "rss", "pss", "seconds")}
            med[config] = m
            print(f"{config:52} {m['daemons']:7.0f} {m['rss'] / 2**20:8.1f} {m['pss'] / 2**20:8.1f} "
                  f"{runs[0]['entries']:11,} {m['seconds']:15.2f} {','.join(r['load'] for r in runs):>12}")  # fmt: skip
        process, base, before, staged = (med[c] for c in configs)

        def namespace(m: dict) -> float:
            return m["rss"] - m["daemons"] * process["rss"]

        print(
            f"namespace RSS (above a 1-record process, per process): one pod {namespace(base) / 2**20:.1f} MiB"
        )
        for label, m in (("before staging", before), ("staged", staged)):
            print(f"ratio {label} / one pod: daemons {m['daemons'] / base['daemons']:.2f}x, "
                  f"RSS {m['rss'] / base['rss']:.2f}x, PSS {m['pss'] / base['pss']:.2f}x, "
                  f"namespace RSS {namespace(m) / 2**20:.1f} MiB = {namespace(m) / namespace(base):.2f}x")  # fmt: skip
        print(f"goal: staged daemons == 1 -> {'met' if staged['daemons'] == 1 else 'NOT met'}; "
              f"staged RSS <= 1.1x one pod -> {'met' if staged['rss'] <= 1.1 * base['rss'] else 'NOT met'}")  # fmt: skip
    finally:
        if plugin is not None:
            with contextlib.suppress(Exception):
                plugin.teardown()
        moto.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
