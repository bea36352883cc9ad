"""A bucket snapshot's automatic warm-up (issue 27), counted in a real moto server's request log.

Each test runs its own moto server, so every GET of its bucket in the log was sent by its
mounts: object reads, ranged or whole, and LIST pages alike. Behaviour only: no timing is
asserted (waits have generous guards).
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import re
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from datahub.cli.main import main
from datahub.storage import StoreRegistry
from tests.fuse.conftest import REPO, FuseEnv, make_env, polled_stats, wait_until
from tests.servers import MotoServer

pytestmark = [pytest.mark.fuse, pytest.mark.slow]

GUARD = 120.0  # seconds a mount, listing or warm-up of these small buckets may take before a test fails


def bucket_env(root: Path, moto: MotoServer, bucket: str | None = None, **cache: object) -> FuseEnv:
    env = make_env(root, moto.endpoint, bucket)
    with open(env.config_path, "a") as fh:  # the [cache] section is the file's last
        fh.writelines(f"{k} = {json.dumps(v)}\n" for k, v in cache.items())
    return env


def put_all(env: FuseEnv, objects: dict[str, bytes]) -> None:
    with StoreRegistry(env.config) as stores:
        store = stores.store(f"s3://{env.bucket}/data")
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda kv: store.put(*kv), objects.items()))


def put_data(moto: MotoServer, env: FuseEnv, objects: dict[str, bytes]) -> None:
    """``put_all`` in plain PUTs (``MotoServer.put_objects`` says why): these tests' buckets
    hold up to 2,100 objects."""
    moto.put_objects(env.bucket, ((f"data/{key}", data) for key, data in objects.items()))


def images(n: int, under: str, seed: int) -> dict[str, bytes]:
    rng = random.Random(seed)
    return {f"{under}/c{i % 8}/{i:05d}.jpg": rng.randbytes(rng.randint(200, 3000)) for i in range(n)}


def requests(moto: MotoServer, env: FuseEnv, under: str = "") -> int:
    """GET lines of the bucket in moto's log: object reads below ``data/<under>``, or with
    ``under=None`` every GET of the bucket (LIST pages included)."""
    log = Path(moto.log.name).read_text(errors="replace")
    return len(re.findall(rf"GET /{env.bucket}/data/{re.escape(under)}\S* HTTP/1\.[01]", log))


def all_gets(moto: MotoServer, env: FuseEnv) -> int:
    log = Path(moto.log.name).read_text(errors="replace")
    return len(re.findall(rf"GET /{env.bucket}[/?]\S* HTTP/1\.[01]", log))


def datahub(env: FuseEnv, *args: str) -> str:
    cmd = [sys.executable, "-m", "datahub.cli.main", "--config", str(env.config_path), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True, cwd=REPO).stdout


def warmup(env: FuseEnv, mnt: Path, *, cli: Callable[..., str] | None = None) -> dict | None:
    """This mount's warm-up as ``datahub --json cache stats`` shows it: the command's own
    function (``datahub.cli.main.main``) run in this process, or with ``cli=datahub`` a
    real CLI run. A CLI process costs ~1 CPU-s of imports (docs/benchmarks.md, "Process
    start") for the same output; each test file keeps one real run per command."""
    if cli is None:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(["--config", str(env.config_path), "--json", "cache", "stats"]) == 0
        text = out.getvalue()
    else:
        text = cli(env, "--json", "cache", "stats")
    found = [w for w in json.loads(text)["warmups"] if w["mount"] == str(mnt)]
    return found[0] if found else None


def polled_warmup(env: FuseEnv, mnt: Path) -> dict | None:
    """``warmup`` read in-process, for polls (``polled_stats`` says why)."""
    found = [w for w in polled_stats(env)["warmups"] if w["mount"] == str(mnt)]
    return found[0] if found else None


def test_a_small_bucket_that_fits_is_warmed_at_mount_without_a_flag(
    tmp_path: Path, private_moto: MotoServer
) -> None:
    env = bucket_env(tmp_path / "env", private_moto)
    data = images(60, "train", 1)
    put_data(private_moto, env, data)
    mnt = env.mountpoint("fits")
    with env.mounted(mnt, f"s3://{env.bucket}/data"):
        wait_until(lambda: (polled_warmup(env, mnt) or {}).get("state") == "done", GUARD)
        w = warmup(env, mnt, cli=datahub)  # this file's real `datahub --json cache stats` run
        assert w == warmup(env, mnt)  # and the in-process run the other tests use says the same
        assert (w["mode"], w["reason"], w["objects_warmed"]) == ("auto", "fits", 60)
        assert (w["objects_left"], w["objects_skipped"], w["bytes_warmed"]) == (
            0,
            0,
            sum(map(len, data.values())),
        )
        assert requests(private_moto, env) == 60  # every object once
        for key, body in data.items():
            assert (mnt / key).read_bytes() == body
        assert requests(private_moto, env) == 60  # the first epoch read the warm cache
        text = datahub(env, "cache", "stats")
        assert f"warm-up of {mnt} [auto]: done (fits: s3://{env.bucket}/data/)" in text


def test_ten_files_of_a_large_bucket_cost_ten_gets_and_its_listing(
    tmp_path: Path, private_moto: MotoServer
) -> None:
    # "large": more objects than cache.bucket_warmup_objects, so it is not warmed at mount
    env = bucket_env(tmp_path / "env", private_moto, bucket_warmup_objects=100)
    data = images(2100, "train", 2)
    put_data(private_moto, env, data)
    before = all_gets(private_moto, env)
    mnt = env.mountpoint("few")
    with env.mounted(mnt, f"s3://{env.bucket}/data"):
        wait_until(lambda: (polled_warmup(env, mnt) or {}).get("state") == "waiting", GUARD)
        for key in random.Random(3).sample(sorted(data), 10):
            assert (mnt / key).read_bytes() == data[key]
        w = warmup(env, mnt)
        assert (w["state"], w["passes"], w["objects_total"]) == ("waiting", 0, 2100)
    assert requests(private_moto, env) == 10  # the ten files, nothing warmed
    assert all_gets(private_moto, env) - before == 10 + 3  # and the listing's 3 pages of 1,000 keys


def test_an_epoch_pattern_warms_the_directory_being_read_and_nothing_else(
    tmp_path: Path, private_moto: MotoServer
) -> None:
    env = bucket_env(tmp_path / "env", private_moto, bucket_warmup_objects=100, bucket_warmup_opens=16)
    train, other = images(400, "train", 4), images(400, "other", 5)
    put_data(private_moto, env, train | other)
    mnt = env.mountpoint("epoch")
    with env.mounted(mnt, f"s3://{env.bucket}/data"):
        wait_until(lambda: (polled_warmup(env, mnt) or {}).get("state") == "waiting", GUARD)
        order = sorted(train)
        random.Random(6).shuffle(order)
        for key in order[:20]:  # an epoch begins: shuffled cold opens across train/
            assert (mnt / key).read_bytes() == train[key]
        wait_until(lambda: (polled_warmup(env, mnt) or {}).get("state") == "done", GUARD)
        w = warmup(env, mnt)
        assert (w["reason"], w["scope"]) == ("pattern", f"s3://{env.bucket}/data/train/")
        assert w["objects_warmed"] == 400 and w["objects_left"] == 0
        assert requests(private_moto, env, "train/") == 400  # each image once: read or warmed
        assert requests(private_moto, env, "other/") == 0  # no reader went there
        for key in order[20:]:
            assert (mnt / key).read_bytes() == train[key]
        assert requests(private_moto, env, "train/") == 400  # the rest of the epoch: no GET


def test_a_directory_that_does_not_fit_is_not_warmed(tmp_path: Path, private_moto: MotoServer) -> None:
    # a disk tier of 256 KiB: its low watermark (80 %) holds far less than train/ (~650 KB)
    env = bucket_env(
        tmp_path / "env",
        private_moto,
        bucket_warmup_objects=100,
        bucket_warmup_opens=16,
        disk_bytes=256 * 1024,
    )
    train = images(400, "train", 7)
    put_data(private_moto, env, train)
    mnt = env.mountpoint("big")
    with env.mounted(mnt, f"s3://{env.bucket}/data"):
        wait_until(lambda: (polled_warmup(env, mnt) or {}).get("state") == "waiting", GUARD)
        keys = random.Random(9).sample(sorted(train), 40)  # across train/c0..c7
        for key in keys:
            assert (mnt / key).read_bytes() == train[key]
        wait_until(lambda: (polled_warmup(env, mnt) or {}).get("state") == "skipped", GUARD)
        w = warmup(env, mnt)
        assert (w["objects_skipped"], w["passes"], w["objects_warmed"]) == (400, 0, 0)
    assert requests(private_moto, env) == 40  # only what was read


def test_no_prefetch_never_warms_a_bucket(tmp_path: Path, private_moto: MotoServer) -> None:
    env = bucket_env(tmp_path / "env", private_moto, bucket_warmup_opens=4)
    data = images(60, "train", 8)
    put_data(private_moto, env, data)
    mnt = env.mountpoint("off")
    with env.mounted(mnt, f"s3://{env.bucket}/data", "--no-prefetch"):
        wait_until(lambda: (polled_warmup(env, mnt) or {}).get("state") == "off", GUARD)
        for key in sorted(data)[:20]:
            assert (mnt / key).read_bytes() == data[key]
        assert warmup(env, mnt)["passes"] == 0
    assert requests(private_moto, env) == 20
