"""The ``make run`` step of the FUSE adapter: mount the sample version and read an epoch over it.

It mounts ``sample@latest`` read-only (a background daemon, unmounted when the demo
stops) and runs a torch DataLoader epoch over the mounted files twice (Pillow decode
through ``datahub.torch.image_loader``, the loader docs/torch.md shows; two worker
processes), then once over the sample's own files on local disk. It prints images/s for
each and the ratio: a lone figure would leave a new user guessing whether it is good.
torch and Pillow are imported here only, for this step.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

DATASET = "sample"


def _cli(demo, *args: str) -> list[str]:
    cmd = [sys.executable, "-m", "fuse_adapter", "--home", str(demo.config.home_path)]
    if demo.args.config:
        cmd += ["--config", demo.args.config]
    return [*cmd, *args]


def mount_and_epoch(demo) -> None:  # demo: datahub.demo.Demo
    if not os.path.exists("/dev/fuse"):
        demo.say("[mount] skipped: /dev/fuse is not available here")
        return
    mnt = demo.config.home_path / "mnt"
    mnt.mkdir(parents=True, exist_ok=True)
    subprocess.run(_cli(demo, "umount", str(mnt)), capture_output=True)  # a leftover from a killed demo
    proc = subprocess.run(
        _cli(demo, "mount", str(mnt), f"{DATASET}@latest", "--background"), capture_output=True, text=True
    )
    if proc.returncode != 0:
        demo.say(f"[mount] could not mount {DATASET}: {proc.stderr.strip()}")
        return
    demo.cleanup.callback(lambda: subprocess.run(_cli(demo, "umount", str(mnt)), capture_output=True))
    root = mnt / DATASET / "latest"
    demo.say(f"[mount] {DATASET}@latest mounted read-only at {mnt} ({os.readlink(root)})")
    rates = []
    for n, where in enumerate((root, root, demo.sample_dir / "images"), 1):
        images, seconds = _epoch(where)
        rates.append(images / seconds)
        what = (
            f"epoch {n} over the mount"
            if where == root
            else "the same epoch over the sample's files on local disk"
        )
        demo.say(
            f"[mount] torch DataLoader {what}: {images} images in {seconds:.2f}s = {rates[-1]:.0f} images/s"
        )
    demo.say(f"[mount] epoch 2 over the mount ran at {rates[1] / rates[2]:.2f}x the loader over local disk")
    demo.notes += [f"Mounted: ls {root}   (datahub umount {mnt} to stop)"]


def _epoch(root: Path) -> tuple[int, float]:
    import torch
    from torch.utils.data import DataLoader, Dataset

    from datahub.torch import image_loader  # no isatty() ioctl per file (docs/torch.md)

    files = sorted(str(p) for p in root.rglob("*.jpg"))

    class Images(Dataset):
        def __len__(self) -> int:
            return len(files)

        def __getitem__(self, i: int):
            data = image_loader(files[i]).resize((64, 64)).tobytes()
            return torch.frombuffer(bytearray(data), dtype=torch.uint8).view(64, 64, 3)

    start = time.perf_counter()
    n = sum(len(batch) for batch in DataLoader(Images(), batch_size=32, shuffle=True, num_workers=2))
    return n, time.perf_counter() - start
