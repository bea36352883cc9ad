"""Background warm-up of a read-only mount (issue 13 items 3 and 5), counted at the origin.

The module runs its own moto server and each test its own bucket, so the GETs of that
bucket in the server's request log are exactly the requests the test's mounts sent.
Behaviour only: no timing is asserted.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from datahub.cache import DiskTier, make_policy
from datahub.cache.pages import page_count, page_key, page_length
from datahub.storage import StoreRegistry
from tests.fuse.conftest import FuseEnv, make_env, polled_stats, read_tree, upload_dataset, wait_until
from tests.fuse.test_bucket_warmup import warmup
from tests.servers import MotoServer

PAGE = 64 * 1024  # small pages, so the two larger objects are warmed as ranged parts
WARMED = 120.0  # seconds a warm-up of this small version may take before the test fails


@pytest.fixture
def warm_env(tmp_path: Path, private_moto: MotoServer) -> FuseEnv:
    env = make_env(tmp_path / "env", private_moto.endpoint)
    with open(env.config_path, "a") as fh:
        fh.write(f"page_size = {PAGE}\n")  # the [cache] section is the file's last
        # the large objects still wait for idle readers (held, then released), for 0.5 s, not
        # the default 30 s that every warm-up here sat out
        fh.write("warmup_idle_seconds = 0.5\n")
    return env


def objects() -> dict[str, bytes]:
    rng = random.Random(13)
    out = {f"img/{i:03d}.jpg": rng.randbytes(rng.randint(1000, 40_000)) for i in range(30)}
    out["big/a.bin"] = rng.randbytes(7 * PAGE + 123)  # more than a few pages: warmed last, in parts
    out["big/b.bin"] = rng.randbytes(6 * PAGE)
    return out


def gets(server: MotoServer, env: FuseEnv) -> int:
    """GETs of the dataset's objects as moto logged them (counted at the server; a 206 line is
    wrapped in colour codes)."""
    pattern = re.compile(rf"GET /{env.bucket}/data/\S* HTTP/1\.[01]")
    return len(pattern.findall(Path(server.log.name).read_text(errors="replace")))


def pages(data: dict[str, bytes]) -> int:
    return sum(page_count(len(b), PAGE) for b in data.values())


def test_a_version_mount_warms_by_default_and_a_remount_sends_no_get(
    warm_env: FuseEnv, private_moto: MotoServer
) -> None:
    data = objects()
    upload_dataset(warm_env, "warm", data)
    assert gets(private_moto, warm_env) == 0
    mnt = warm_env.mountpoint("m")
    log = warm_env.root / "mount-m.log"
    with warm_env.mounted(mnt, "warm"):  # no flag: warm-up is the default for a version
        wait_until(lambda: "prefetch finished" in log.read_text(), WARMED)
        assert "background warm-up: on" in log.read_text()
        assert gets(private_moto, warm_env) == pages(data)  # every page once, nothing twice
        # shown per mount like a bucket mount's warm-up (`datahub cache stats`, /metrics)
        wait_until(
            lambda: (warmup(warm_env, mnt) or {}).get("state") == "done", WARMED
        )  # published each second
        shown = warmup(warm_env, mnt)
        assert shown is not None
        assert (shown["state"], shown["reason"], shown["mode"]) == ("done", "default", "auto")
        assert (shown["objects_total"], shown["bytes_total"]) == (len(data), sum(map(len, data.values())))
        assert (shown["objects_warmed"], shown["bytes_warmed"]) == (len(data), sum(map(len, data.values())))
        assert (shown["objects_left"], shown["bytes_left"], shown["objects_skipped"]) == (0, 0, 0)
        assert read_tree(mnt / "warm" / "v1") == data
        assert gets(private_moto, warm_env) == pages(data)  # the first epoch read the warm cache
    with warm_env.mounted(mnt, "warm"):
        wait_until(lambda: log.read_text().count("prefetch finished") == 2, WARMED)
        assert gets(private_moto, warm_env) == pages(data)  # the version is cached: 0 GETs


def test_no_prefetch_turns_the_warm_up_off(warm_env: FuseEnv, private_moto: MotoServer) -> None:
    data = objects()
    upload_dataset(warm_env, "cold", data)
    mnt = warm_env.mountpoint("m")
    log = warm_env.root / "mount-m.log"
    with warm_env.mounted(mnt, "cold", "--no-prefetch"):
        assert (mnt / "cold" / "v1" / "img" / "004.jpg").read_bytes() == data["img/004.jpg"]
        assert "background warm-up: off" in log.read_text()
    assert gets(private_moto, warm_env) == 1  # the one file read, nothing warmed
    assert "prefetch finished" not in log.read_text()


def _disk_used(env: FuseEnv) -> int:
    """Bytes the disk tier holds, from the mount's stats snapshots."""
    return sum(t["used_bytes"] for t in polled_stats(env)["tiers"] if t["tier"] == "disk")


def test_unmount_during_warm_up_leaves_only_whole_pages(warm_env: FuseEnv, private_moto: MotoServer) -> None:
    data = objects()
    upload_dataset(warm_env, "cut", data)
    mnt = warm_env.mountpoint("m")
    with warm_env.mounted(mnt, "cut"):
        # the warm-up is under way: a page stored, not only a GET answered (moto logs the answer
        # before the daemon has the page: an unmount in between found none, `assert 0 < 0`, on a
        # loaded machine)
        wait_until(lambda: gets(private_moto, warm_env) > 0 and _disk_used(warm_env) > 0, WARMED)
    # unmounted (the daemon exited): every page the disk tier holds is whole and verified
    disk = DiskTier(warm_env.config.resolved_disk_dir, 1 << 30, make_policy("lru", 1 << 30))
    found = 0
    try:
        with StoreRegistry(warm_env.config) as stores:
            store = stores.store(f"s3://{warm_env.bucket}/data")
            for key, body in data.items():
                ref = store.ref(key)
                for i in range(page_count(ref.size, PAGE)):
                    page = page_key(ref, PAGE, i)
                    if disk.contains(page):
                        found += 1
                        assert disk.get(page) == body[i * PAGE : i * PAGE + page_length(ref, PAGE, i)]
    finally:
        disk.close()
    assert 0 < found <= pages(data)
    assert found <= gets(private_moto, warm_env)  # nothing stored that was not fetched


def test_the_warm_up_order_is_smallest_first_or_streamed_in_key_order() -> None:
    from datahub.storage.base import ObjectRef
    from fuse_adapter.warmup_order import warm_up_order

    refs = [ObjectRef(f"s3://b/k{i}", "e", size) for i, size in enumerate([50, 10, 30, 20, 40])]
    assert [r.size for r in warm_up_order(iter(refs), limit=5)] == [10, 20, 30, 40, 50]
    taken = []

    def listing():
        for ref in refs:
            taken.append(ref)
            yield ref

    order = warm_up_order(listing(), limit=2)  # more files than the limit: key order, streamed
    assert len(taken) == 3  # only what was needed to tell
    assert list(order) == refs and len(taken) == 5
