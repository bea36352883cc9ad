"""How soon a reader sees an origin that came back (issue 23), through a real version mount.

moto on loopback behind ``bench.outage_proxy.OutageProxy``; a dataset of N small files; a
version mount with DEFAULT settings (``s3.total_timeout`` 30 s, ``s3.max_attempts`` 6) and
warm-up on (the default) or ``--no-prefetch``. Scenarios:

- ``refuse``: the origin refuses connections for ``--outage`` seconds while one reader
  reads a file once a second; then it comes back. Figure: seconds from recovery to the
  reader's first byte-exact read; then every file is read at once (default flags: the
  warm-up met the outage too) and checked.
- ``stall``: the origin accepts and holds every byte for ``--stall`` seconds (default 30),
  then delivers them (a black-holed network that comes back); the reader polls once a
  second; same figure.
- ``hang``: the same, but requests sent during the hang are never answered, after the
  recovery too (the server lost those connections); only new connections are served.

Run: ``.venv/bin/python -m bench.faults.outage_recovery [--files 200] [--stall 30]``.
Prints one line per scenario and a JSON summary; goals: refuse <= 1 s, stall <= 6 s after
recovery, and every file byte-exact right after recovery.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import boto3
from botocore.config import Config as BotoConfig

from bench.cold.moto import Moto
from bench.outage_proxy import OutageProxy

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def setup(root: Path, moto: Moto, proxy: OutageProxy, n: int) -> tuple[Path, dict[str, bytes]]:
    """A datahub home whose dataset ``ds`` (v1) holds ``n`` files imported from the bucket."""
    s3 = boto3.client(
        "s3",
        endpoint_url=moto.url,
        aws_access_key_id="test",
        aws_secret_access_key="test",
        region_name="us-east-1",
        config=BotoConfig(s3={"addressing_style": "path"}),
    )
    s3.create_bucket(Bucket="outage")
    rng = random.Random(1)
    objects = {}
    for i in range(n):
        data = rng.randbytes(rng.randint(20_000, 120_000))
        s3.put_object(Bucket="outage", Key=f"data/img/{i:05d}.jpg", Body=data)
        objects[f"img/{i:05d}.jpg"] = data
    config = root / "datahub.toml"
    config.write_text(
        f'home = "{root / "var"}"\n[s3]\nendpoint_url = "{proxy.url}"\naccess_key_id = "test"\n'
        'secret_access_key = "test"\nregion = "us-east-1"\npath_style = true\n'
    )
    cli = [str(Path(sys.executable).parent / "datahub"), "--config", str(config)]
    subprocess.run(
        [*cli, "import", "s3://outage/data/", "--to", "ds"], check=True, capture_output=True, cwd=REPO
    )
    return config, objects


@contextlib.contextmanager
def mounted(config: Path, mnt: Path, flags: list[str]):
    """A version mount with a disk tier of its own (each scenario starts cold)."""
    mnt.mkdir(parents=True, exist_ok=True)
    cache = mnt.with_name(mnt.name + "-cache")
    cmd = [sys.executable, "-m", "fuse_adapter", "--config", str(config), "mount", str(mnt), "ds@1", *flags]
    cmd += ["--cache-dir", str(cache)]
    proc = subprocess.Popen([*cmd, "--background"], cwd=REPO)
    proc.wait(120)
    try:
        yield mnt / "ds" / "v1"
    finally:
        subprocess.run(
            [sys.executable, "-m", "fuse_adapter", "--config", str(config), "umount", str(mnt)],
            capture_output=True,
            cwd=REPO,
        )


def poll_until_read(path: Path, want: bytes, since: float, limit: float = 180.0) -> float | None:
    """Read ``path`` once a second; seconds after ``since`` of the first byte-exact read."""
    while time.monotonic() - since < limit:
        try:
            if path.read_bytes() == want:
                return time.monotonic() - since
        except OSError:
            pass
        time.sleep(1.0)
    return None


def scenario(
    kind: str, flags: list[str], args, config: Path, objects, proxy: OutageProxy, root: Path
) -> dict:
    name = f"{kind}{'-' + flags[0].lstrip('-') if flags else '-default'}"
    with mounted(config, root / f"mnt-{name}", flags) as tree:
        key = sorted(objects)[len(objects) // 2]
        path, want = tree / key, objects[key]
        proxy.set_mode(kind)
        outage = args.outage if kind == "refuse" else args.stall  # stall and hang
        errors = 0
        stop = threading.Event()

        def reader() -> None:  # a DataLoader retrying its sample once a second during the outage
            nonlocal errors
            while not stop.is_set():
                try:
                    path.read_bytes()
                except OSError:
                    errors += 1
                stop.wait(1.0)

        thread = threading.Thread(target=reader, daemon=True)
        thread.start()
        time.sleep(outage)
        stop.set()
        proxy.set_mode("up")
        recovered = time.monotonic()
        thread.join()
        first = poll_until_read(path, want, recovered, args.give_up)
        t0 = time.monotonic()
        wrong = failed = 0
        for k, data in objects.items():
            try:
                if (tree / k).read_bytes() != data:
                    wrong += 1
            except OSError:
                failed += 1
        result = {
            "scenario": name,
            "outage_s": outage,
            "errors_during_outage": errors,
            "first_read_after_recovery_s": None if first is None else round(first, 2),
            "files": len(objects),
            "wrong_bytes": wrong,
            "failed_after_recovery": failed,
            "all_files_s": round(time.monotonic() - t0, 2),
        }
        print(json.dumps(result), flush=True)
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--outage", type=float, default=10.0, help="seconds of refused connections")
    parser.add_argument("--stall", type=float, default=30.0, help="seconds of a stalled origin")
    parser.add_argument("--scenarios", default="refuse,stall,hang")
    parser.add_argument("--give-up", type=float, default=120.0, help="seconds of polling after recovery")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="datahub-outage-"))
    moto = Moto(free_port(), root / "moto")
    results = []
    try:
        with OutageProxy(moto.url) as proxy:
            config, objects = setup(root, moto, proxy, args.files)
            for kind in args.scenarios.split(","):
                for flags in ([], ["--no-prefetch"]):
                    os.environ.pop("DATAHUB_CONFIG", None)
                    results.append(scenario(kind, flags, args, config, objects, proxy, root))
    finally:
        moto.stop()
    print(json.dumps({"results": results}, indent=1))


if __name__ == "__main__":
    main()
