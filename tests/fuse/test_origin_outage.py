"""Reads through a real version mount across an origin outage (issue 23), with warm-up on
(the default) and off: right after a refusing origin comes back every file reads
byte-exact, and a reader retrying once a second across a stall's recovery reads the file
once the remembered timeout (``cache.stall_memory_seconds``, STALL_MEMORY here) is up, never later. Real moto behind a TCP proxy that
refuses or stalls; only "before a generous guard" is asserted about time."""

from __future__ import annotations

import errno
import re
import time
from pathlib import Path

import pytest

from bench.outage_proxy import OutageProxy
from tests.fuse.conftest import make_env, read_tree, upload_dataset
from tests.fuse.test_bucket_warmup import put_all
from tests.storage.test_s3_stall import run_guarded

GUARD = 30.0
STALL_MEMORY = 2.0  # seconds a stall is remembered here (5 s by default): the reader waits less of it out


def outage_env(tmp_path: Path, moto_endpoint, proxy: OutageProxy, n: int = 30):
    env = make_env(tmp_path / "env", moto_endpoint)
    objects = {f"img/{i:03d}.jpg": bytes([i]) * (5_000 + 997 * i) for i in range(n)}
    upload_dataset(env, "outage", objects)
    text = env.config_path.read_text()
    text = re.sub(r'endpoint_url = ".*"', f'endpoint_url = "{proxy.url}"', text)
    text = text.replace("max_attempts = 3\n", "max_attempts = 2\nread_timeout = 60.0\ntotal_timeout = 1.0\n")
    text += f"stall_memory_seconds = {STALL_MEMORY}\n"  # the [cache] section is the file's last
    env.config_path.write_text(text)
    return env, objects


def read_file(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


@pytest.mark.parametrize("flags", [(), ("--no-prefetch",)], ids=["warm-up", "no-prefetch"])
def test_every_file_reads_right_after_a_refusing_origin_comes_back(tmp_path, moto_endpoint, flags) -> None:
    with OutageProxy(moto_endpoint.url) as proxy:
        env, objects = outage_env(tmp_path, moto_endpoint, proxy)
        proxy.set_mode("refuse")  # down before the mount: a default mount's warm-up meets the outage
        mnt = env.mountpoint("outage")
        with env.mounted(mnt, "outage@1", *flags):
            root = mnt / "outage" / "v1"
            first = root / "img" / "000.jpg"
            for path in sorted((root / "img").iterdir())[:5]:
                error = run_guarded(lambda p=path: read_file(p))
                assert isinstance(error, OSError) and error.errno == errno.EIO, error
            time.sleep(1.0)  # the warm-up (when on) meets the outage too
            proxy.set_mode("up")
            assert read_file(first) == objects["img/000.jpg"]
            assert read_tree(root) == objects


def test_a_reader_retrying_every_second_across_a_stall_reads_once_the_origin_is_back(
    tmp_path, moto_endpoint
) -> None:
    with OutageProxy(moto_endpoint.url) as proxy:
        env, objects = outage_env(tmp_path, moto_endpoint, proxy, n=3)
        mnt = env.mountpoint("outage")
        with env.mounted(mnt, "outage@1", "--no-prefetch"):
            path = mnt / "outage" / "v1" / "img" / "001.jpg"
            proxy.set_mode("stall")
            error = run_guarded(lambda: read_file(path))
            assert isinstance(error, OSError) and error.errno == errno.EIO, error
            proxy.set_mode("up")
            recovered = time.monotonic()
            while True:
                try:
                    data = read_file(path)
                    break
                except OSError as exc:
                    assert exc.errno == errno.EIO, exc
                    assert time.monotonic() - recovered < GUARD, "the reader never saw the origin return"
                    time.sleep(1.0)
            assert data == objects["img/001.jpg"]


def test_a_listing_that_failed_answers_eio_not_enoent_and_is_retried(tmp_path, moto_endpoint) -> None:
    """Chaos soak, seed 26: a daemon whose listing load failed (there: the catalog service
    killed) answered ENOENT for files the mount holds until the end of the run. Here a
    bucket mount's listing meets a refusing origin: names are unknown (EIO), not absent,
    and once the origin is back the listing is retried and every file reads."""
    with OutageProxy(moto_endpoint.url) as proxy:
        env, _ = outage_env(tmp_path, moto_endpoint, proxy, n=3)
        objects = {f"b/{i:03d}.bin": bytes([i]) * (1_000 + i) for i in range(40)}
        put_all(env, objects)
        proxy.set_mode("refuse")
        mnt = env.mountpoint("bucket")
        with env.mounted(mnt, f"s3://{env.bucket}/data", "--no-prefetch"):
            path = mnt / "b" / "007.bin"
            for _ in range(3):  # repeated: a negative entry would be cached by the kernel
                error = run_guarded(lambda: read_file(path))
                assert isinstance(error, OSError) and error.errno == errno.EIO, error
            proxy.set_mode("up")
            deadline = time.monotonic() + GUARD
            while True:  # the loader retries after a pause of at most 30 s (doubling from 1 s)
                try:
                    data = read_file(path)
                    break
                except OSError as exc:
                    assert exc.errno == errno.EIO, exc
                    assert time.monotonic() < deadline + 30, "the listing was never retried"
                    time.sleep(0.5)
            assert data == objects["b/007.bin"]
            assert read_tree(mnt / "b") == {k.removeprefix("b/"): v for k, v in objects.items()}
