"""The ``make run`` step of the FUSE adapter: mount the sample version and read an epoch over it.

It mounts ``sample@latest`` read-only (a background daemon, unmounted when the demo
stops; noted in ``<home>/demo.mount``, so that a killed demo's daemon is the one mount the
next demo unmounts at ``<home>/mnt``: any other there stays, and the step is skipped) and runs a torch DataLoader epoch over the mounted files twice (Pillow decode
through ``datahub.torch.image_loader``, the loader docs/torch.md shows; two worker
processes), then once over the same files on local disk (the version's records' own files,
``epoch_files``). It prints images/s for
each and the ratio: a lone figure would leave a new user guessing whether it is good.
torch and Pillow are imported only in a child process that runs the epochs.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
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
    refused = clear_leftover(demo, mnt)
    if refused:
        demo.say(f"[mount] skipped: {refused}")
        return
    proc = subprocess.run(
        _cli(demo, "mount", str(mnt), f"{DATASET}@latest", "--background"), capture_output=True, text=True
    )
    if proc.returncode != 0:
        demo.say(f"[mount] could not mount {DATASET}: {proc.stderr.strip()}")
        return
    demo.cleanup.callback(lambda: _unmount_own(demo, mnt))
    remember_mount(demo.config.home_path, mnt)
    root = mnt / DATASET / "latest"
    demo.say(f"[mount] {DATASET}@latest mounted read-only at {mnt} ({os.readlink(root)})")
    seq = int(os.readlink(root).removeprefix("v"))
    mounted, local = epoch_files(demo, seq, root)
    dirs = {"epoch 1 over the mount": mounted, "epoch 2 over the mount": mounted}
    dirs["the same epoch over the same files on local disk"] = local
    epochs: list[tuple[int, float]] = []
    for what, epoch in zip(dirs, _epochs_in_child(list(dirs.values())), strict=False):
        if isinstance(epoch, str):
            demo.say(f"[mount] the DataLoader epochs failed: {epoch}")
            break
        epochs.append(epoch)
        images, seconds = epoch
        demo.say(
            f"[mount] torch DataLoader {what}: {images} images in {seconds:.2f}s = {images / seconds:.0f} images/s"
        )
        if len(epochs) == len(dirs):  # said now, not after the child's exit
            (_, mount_s), (_, local_s) = epochs[1], epochs[2]
            demo.say(
                f"[mount] epoch 2 over the mount ran at {local_s / mount_s:.2f}x the loader over local disk"
                + busy_note()
            )
    # quoted: a home with a space (``--home "my home"``) split the commands in two as typed
    demo.notes += [
        f"Mounted: ls {shlex.quote(str(root))}   (unmounted when the demo stops; by hand: "
        f"{demo.cli} umount {shlex.quote(str(mnt))})"
    ]


IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")


def epoch_files(demo, seq: int, root: Path) -> tuple[list[Path], list[Path]]:  # demo: datahub.demo.Demo
    """The files the epochs read: the mounted version's images, through the mount and on local
    disk, in the same order, one local file per mounted one.

    Why: the local baseline read every JPEG under the sample's directory, 300 of them, while the
    mount showed the version's 299 (a record removed since the import): the ratio compared two
    different epochs. A record's local file is the one it was imported from (a ``file://`` URL
    of the same size); one that has none (committed by LabelX, imported from S3) is copied from
    the mount to ``<home>/epoch-local`` first, so the baseline still reads it from local disk."""
    from urllib.parse import unquote, urlsplit

    copies = demo.config.home_path / "epoch-local"
    mounted, local = [], []
    for record in demo.catalog.list_records(DATASET, seq):
        if not record.key.lower().endswith(IMAGE_SUFFIXES):
            continue
        through = root / record.key
        url = urlsplit(record.url)
        own = Path(unquote(url.path)) if url.scheme == "file" else None
        if own is None or not _same_size(own, record.size):
            own = copies / record.key
            if not _same_size(own, record.size):
                own.parent.mkdir(parents=True, exist_ok=True)
                own.write_bytes(through.read_bytes())
        mounted.append(through)
        local.append(own)
    return mounted, local


def _same_size(path: Path, size: int) -> bool:
    try:
        return path.stat().st_size == size
    except OSError:
        return False


DEMO_MOUNT = (
    "demo.mount"  # under the home: the mount daemon a demo started there ({"mountpoint", "pid", "source"})
)


def remember_mount(home: Path, mnt: Path) -> None:
    """Note the daemon this demo mounted ``mnt`` with, so that a later demo knows a mount it
    finds there for this one's leftover (a killed demo leaves its daemon running: a session of
    its own) and nobody else's."""
    from fuse_adapter import daemon

    record = daemon.read_record(home, str(mnt))
    if record is None:
        return
    noted = {"mountpoint": daemon.canonical(str(mnt)), "pid": record.pid, "source": record.source}
    tmp = home / f".{DEMO_MOUNT}.tmp"
    tmp.write_text(json.dumps(noted) + "\n")
    os.replace(tmp, home / DEMO_MOUNT)


def _unmount_own(demo, mnt: Path) -> None:  # demo: datahub.demo.Demo
    subprocess.run(_cli(demo, "umount", str(mnt)), capture_output=True)
    (demo.config.home_path / DEMO_MOUNT).unlink(missing_ok=True)


def demo_leftover(home: Path, mnt: Path) -> bool:
    """True if what is mounted at ``mnt`` is the daemon a demo of ``home`` started (alive, or
    dead and its mount stale): its mount record in ``home`` is the one the demo noted, and the
    mount there is a datahub version mount."""
    from fuse_adapter import daemon

    try:
        noted = json.loads((home / DEMO_MOUNT).read_text())
    except (OSError, ValueError):
        return False
    record = daemon.read_record(home, str(mnt))
    visible = daemon.visible_mount(str(mnt))
    return (
        isinstance(noted, dict)
        and record is not None
        and visible is not None
        and noted.get("mountpoint") == daemon.canonical(str(mnt))
        and noted.get("pid") == record.pid
        and noted.get("source") == record.source
        and visible[0].startswith("fuse")
        and visible[1].startswith("datahub:")
    )


def clear_leftover(demo, mnt: Path) -> str | None:  # demo: datahub.demo.Demo
    """Unmount a killed demo's leftover at ``mnt``; None when ``mnt`` is then free to mount on,
    else why the step refuses, naming the mount and what to do.

    Why: the step unmounted whatever was mounted there, a mount its user made by hand
    included (leftovers25): only the daemon an earlier demo of this home noted is a leftover."""
    from fuse_adapter import daemon

    home = demo.config.home_path
    if not daemon.is_mounted(str(mnt)):
        (home / DEMO_MOUNT).unlink(missing_ok=True)  # its daemon is gone and unmounted
        return None
    if demo_leftover(home, mnt):
        _unmount_own(demo, mnt)
        if not daemon.is_mounted(str(mnt)):
            return None
    fstype, source = daemon.visible_mount(str(mnt)) or ("?", "?")
    return (
        f"{mnt} is already a mount point ({source}, type {fstype}) that no demo left there, so it stays "
        f"mounted; if it is yours to drop, unmount it ({demo.cli} umount {mnt}, or fusermount3 -u {mnt}) "
        "and run the demo again, or run it with another home: DATAHUB_HOME=DIR make run "
        "(or .venv/bin/python -m datahub.demo --home DIR)"
    )


def busy_note(load: float | None = None, cores: int | None = None) -> str:
    """A caveat when other work had the cores: the ratio is one short epoch's wall time each,
    and on a busy machine it moved from 2.46x to 0.65x between two runs (newuser16), which a
    new user would take for the product's figure. The measured figures are in
    docs/benchmarks.md."""
    load = os.getloadavg()[0] if load is None else load
    cores = len(os.sched_getaffinity(0)) if cores is None else cores
    if load <= cores:
        return ""
    return (
        f" (load average {load:.1f} on {cores} cores: a busy machine's wall-clock ratio is noise;"
        " measured figures: docs/benchmarks.md)"
    )


def _epochs_in_child(lists: list[list[Path]]) -> Iterator[tuple[int, float] | str]:
    """The epochs, run by a child process: torch stays out of the demo's own process, which
    goes on serving the API (300 MB less resident) and exits at Ctrl-C without tearing torch
    down (seconds of CPU). Each epoch reads one list of files (given to the child as a JSON
    file). Yields (images, seconds) per list as each epoch ends, or, if the child fails, its
    last words."""
    with tempfile.NamedTemporaryFile("w", suffix=".json") as listed:
        json.dump([[str(p) for p in files] for files in lists], listed)
        listed.flush()
        yield from _run_child([sys.executable, "-m", "fuse_adapter.demo_step", listed.name])


def _run_child(cmd: list[str]) -> Iterator[tuple[int, float] | str]:
    with tempfile.TemporaryFile("w+") as err:  # a file, not a pipe: it never fills up
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                images, seconds = line.split()
                yield int(images), float(seconds)
        if proc.returncode != 0:
            err.seek(0)
            yield (err.read().strip().splitlines() or [f"exit code {proc.returncode}"])[-1]


def _epoch(files: list[str]) -> tuple[int, float]:
    import torch
    from torch.utils.data import DataLoader, Dataset

    from datahub.torch import image_loader  # no isatty() ioctl per file (docs/torch.md)

    class Images(Dataset):
        def __len__(self) -> int:
            return len(files)

        def __getitem__(self, i: int):
            data = image_loader(files[i]).resize((64, 64)).tobytes()
            return torch.frombuffer(bytearray(data), dtype=torch.uint8).view(64, 64, 3)

    start = time.perf_counter()
    n = sum(len(batch) for batch in DataLoader(Images(), batch_size=32, shuffle=True, num_workers=2))
    return n, time.perf_counter() - start


if __name__ == "__main__":  # the child of _epochs_in_child: one "images seconds" line per list
    for files in json.loads(Path(sys.argv[1]).read_text()):
        print(*_epoch(files), flush=True)
