"""A version mount reports its paged namespace: directory pages held against their budget and
the listings it asked the catalog for (``datahub cache stats --json``, ``/metrics``). The
namespace is the memory issue 38 bounds; an operator must be able to see it per mount."""

from __future__ import annotations

import contextlib
import io
import json
import os

import pytest

from datahub.cache.metrics import mount_text
from datahub.cli.main import main
from tests.fuse.conftest import FuseEnv, polled_mount, upload_dataset, wait_until

pytestmark = pytest.mark.fuse


def test_a_version_mount_reports_its_directory_pages_and_listings(env: FuseEnv) -> None:
    objects = {f"d{d}/f{i}.bin": os.urandom(100 + i) for d in range(3) for i in range(4)}
    ds = upload_dataset(env, "nsstats", objects)
    mnt = env.mountpoint("nsstats")
    with env.mounted(mnt, ds.name):
        root = mnt / ds.name / f"v{ds.seq}"
        for d in range(3):
            assert sorted(p.name for p in (root / f"d{d}").iterdir()) == [f"f{i}.bin" for i in range(4)]
        wait_until(lambda: polled_mount(env).get("namespace_directory_listings", 0) >= 3, 60.0)
        out = io.StringIO()  # the command's own function, in this process (no CLI start's imports)
        with contextlib.redirect_stdout(out):
            assert main(["--config", str(env.config_path), "--json", "cache", "stats"]) == 0
        row = next(m for m in json.loads(out.getvalue())["mounts"] if m["mountpoint"] == str(mnt))
        assert row["namespace_directory_listings"] >= 3  # the three folders, each listed once
        assert 0 < row["namespace_page_bytes"] <= row["namespace_budget_bytes"]
        assert row["namespace_pages"] >= 1


def test_the_namespace_figures_are_metrics_of_each_mount() -> None:
    text = mount_text(
        [{"mounts": [{"mountpoint": "/m", "mode": "passthrough", "namespace_page_bytes": 4096,
                      "namespace_directory_listings": 7}]}]
    )  # fmt: skip
    assert 'datahub_mount_namespace_bytes{mount="/m"} 4096' in text
    assert 'datahub_mount_namespace_listings_total{mount="/m"} 7' in text
