"""One DataLoader epoch over the same images with the same transform, read three ways:

1. the packed LMDB version (``datahub pack --resize shorter=256``, or ``--pack-resize``) via PackedDataset;
2. the raw version through the FUSE mount (``datahub mount``) via VersionDataset;
3. the raw files on local disk via VersionDataset.

    .venv/bin/python bench/pack/loader_epoch.py [--photos 240] [--size 1024x768] [--no-mount]

The transform is identical in every arm: decode (``--decode full``: the whole image, as
torchvision's default loader does; ``--decode draft``: JPEG draft mode when it shrinks),
bilinear resize to 224x224, float tensor. Each arm runs two epochs: the first (cold:
the mount/cache and the page cache fill) and the second (warm); both are printed.
Goals: packed >= 3x raw-through-mount, and no slower than raw on local disk.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from _setup import MACHINE, fresh_home, import_photos, photo_files

from datahub.pack import PackSpec, pack
from datahub.torch import CacheSource, MountSource, PackedDataset, StepTimer, VersionDataset
from datahub.torch._torch import DataLoader, image_tensor

SIZE = (224, 224)
DRAFT = False  # set from --decode


def transform(data, labels):
    return image_tensor(data, SIZE, draft=DRAFT).float().div_(255), labels["class"]


def epoch(dataset, workers: int, batch: int) -> dict[str, float]:
    loader = DataLoader(dataset, batch_size=batch, shuffle=True, num_workers=workers,
                        persistent_workers=False, prefetch_factor=4 if workers else None)  # fmt: skip
    timer = StepTimer()
    for _ in timer.iterate(loader):
        pass  # no model: the epoch measures the input pipeline alone
    return timer.report()


def cpu_cost(dataset, batch: int, daemon_pid: int | None) -> float:
    """CPU milliseconds per image for one epoch in this process (num_workers=0), plus the
    FUSE daemon's CPU when reading through the mount. Unlike wall time it hardly moves when
    other jobs compete for the cores, so it is the stable figure on a shared machine."""
    before, daemon_before = time.process_time(), _proc_cpu(daemon_pid)
    report = epoch(dataset, 0, batch)
    spent = time.process_time() - before + _proc_cpu(daemon_pid) - daemon_before
    return 1000 * spent / report["samples"]


def _proc_cpu(pid: int | None) -> float:
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def datahub_cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    repo = Path(__file__).resolve().parents[2]
    return subprocess.run([sys.executable, "-m", "datahub.cli.main", "--home", str(home / "var"), *args],
                          cwd=repo, capture_output=True, text=True, timeout=120)  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--photos", type=int, default=240)
    p.add_argument("--size", default="1024x768")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--no-mount", action="store_true")
    p.add_argument(
        "--pack-resize", default="shorter=256", help="--resize of the packed arm (WxH crops centre)"
    )
    p.add_argument("--decode", choices=["full", "draft"], default="full",
                   help="full: decode then resize (torchvision's usual loader); draft: JPEG draft mode")  # fmt: skip
    args = p.parse_args()
    global DRAFT
    DRAFT = args.decode == "draft"
    w, h = map(int, args.size.split("x"))
    home, config, catalog = fresh_home("bench-loader-")
    raw_dir = home / "photos"
    manifest = photo_files(raw_dir, args.photos, 24, w, h)
    import_photos(config, catalog, manifest, "photos")
    crop = "center" if "x" in args.pack_resize else ""
    spec = PackSpec.parse(resize=args.pack_resize, crop=crop, shard_size="8MiB")
    pack(config, catalog, "photos", "photos-packed", spec, workers=2)
    source = CacheSource(config)
    packed = PackedDataset.open(
        catalog, source, "photos-packed", cache_dir=home / "shards", transform=transform
    )
    source.close()
    raw_bytes = sum(f.stat().st_size for f in raw_dir.rglob("*.jpg")) / 1e6
    packed_bytes = sum(f.stat().st_size for f in (home / "shards").glob("*.lmdb")) / 1e6
    arms = {"packed LMDB version": packed,
            "raw files on local disk": VersionDataset.from_catalog(catalog, "photos", None, MountSource(raw_dir),
                                                                   transform=transform)}  # fmt: skip
    mountpoint = home / "mnt"
    mounted, daemon_pid = False, None
    if not args.no_mount:
        mountpoint.mkdir()
        out = datahub_cli(home, "--json", "mount", str(mountpoint), "photos@v1", "--background")
        mounted = out.returncode == 0 and (mountpoint / "photos" / "v1").is_dir()
        daemon_pid = json.loads(out.stdout)["pid"] if mounted else None
        if mounted:
            arms["raw files through the FUSE mount"] = VersionDataset.from_catalog(
                catalog, "photos", None, MountSource(mountpoint / "photos" / "v1"), transform=transform)  # fmt: skip
        else:
            print(f"(mount failed, arm skipped: {out.stderr.strip()[-300:]})")
    print(f"# DataLoader epoch, {args.photos} JPEGs {w}x{h} ({raw_bytes:.0f} MB raw, {packed_bytes:.0f} MB packed "
          f"at {args.pack_resize}{' crop' if crop else ''}), "
          f"transform {args.decode} decode + resize {SIZE[0]}x{SIZE[1]}, {args.workers} loader workers, batch {args.batch}; "
          f"{MACHINE}; cpus available {len(os.sched_getaffinity(0))}")  # fmt: skip
    print("| read path | cold epoch img/s | warm epoch img/s | warm data_time ms/batch | CPU ms/image |")
    print("|---|---|---|---|---|")
    rates, costs = {}, {}
    try:
        for name, dataset in arms.items():
            cold = epoch(dataset, args.workers, args.batch)
            t = time.perf_counter()
            warm = epoch(dataset, args.workers, args.batch)
            rates[name] = warm["samples"] / (time.perf_counter() - t)
            costs[name] = cpu_cost(dataset, args.batch, daemon_pid if "mount" in name else None)
            print(f"| {name} | {cold['samples_per_second']:.0f} | {rates[name]:.0f} | "
                  f"{warm['data_time_per_batch'] * 1000:.0f} | {costs[name]:.1f} |")  # fmt: skip
    finally:
        if mounted:
            datahub_cli(home, "umount", str(mountpoint))
    packed_rate = rates["packed LMDB version"]
    for name, rate in rates.items():
        if name != "packed LMDB version":
            print(f"packed / {name}: {packed_rate / rate:.2f}x warm wall-clock, "
                  f"{costs[name] / costs['packed LMDB version']:.2f}x less CPU per image")  # fmt: skip


if __name__ == "__main__":
    main()
