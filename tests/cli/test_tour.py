"""README.md's tour, run as written (issue 37 item 2): every line of the block, in order, in
bash with ``set -e``, with real background FUSE mounts, against a local S3 server (moto).

Only two things are put in place before it runs: ``/mnt/`` becomes this test's directory and
``s3://bucket/`` a fresh bucket holding a few JPEGs under ``imagenet/`` and files under
``prefix/``. A tour line that blocks (a foreground mount) fails the test by its timeout; every
mount is unmounted in teardown, even when the tour failed half-way.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from datahub.catalog import open_catalog
from datahub.storage import StoreRegistry
from fuse_adapter.daemon import is_mounted
from tests.fuse.conftest import make_env

# ~13 CLI processes, three mount daemons and a two-worker pack: about 3 min on a loaded 2-core
# machine. The bound only catches a line that never returns (a foreground mount), never speed.
pytestmark = [pytest.mark.fuse, pytest.mark.slow, pytest.mark.timeout(900)]
TOUR_BOUND = 780  # seconds
REPO = Path(__file__).resolve().parents[2]
MOUNTS = ("data", "raw", "out")


def tour() -> str:
    readme = (REPO / "README.md").read_text()
    section = readme.split("## A tour", 1)[1]
    return re.search(r"```bash\n(.*?)```", section, re.S).group(1)


def jpeg(shade: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 48), (shade, 100, 200 - shade)).save(out, "JPEG")
    return out.getvalue()


def test_the_readme_tour_runs_as_written(tmp_path, moto_endpoint):
    env = make_env(tmp_path / "home", moto_endpoint)
    with StoreRegistry(env.config) as stores:
        store = stores.store(f"s3://{env.bucket}")
        for i in range(6):
            store.put(f"imagenet/train/{'cat' if i % 2 else 'dog'}/{i:04d}.jpg", jpeg(i * 30))
        for i in range(3):
            store.put(f"prefix/part-{i}.txt", f"row {i}\n".encode())
    script = tour()
    assert "--background" in script and "mkdir -p" in script
    mnt = tmp_path / "mnt"
    script = script.replace("/mnt/", f"{mnt}/").replace("s3://bucket/", f"s3://{env.bucket}/")
    bin_dir = Path(sys.executable).parent
    run_env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "DATAHUB_CONFIG": str(env.config_path),
    }
    try:
        proc = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=tmp_path, env=run_env, capture_output=True, text=True, timeout=TOUR_BOUND,
        )  # fmt: skip
        assert proc.returncode == 0, f"the tour failed:\n{proc.stdout}\n{proc.stderr}"
    finally:
        for name in MOUNTS:
            point = mnt / name
            if is_mounted(str(point)):
                env.cli("umount", str(point), check=False)
            if is_mounted(str(point)):
                subprocess.run(["fusermount3", "-uz", str(point)], check=False)
    assert not any(is_mounted(str(mnt / name)) for name in MOUNTS)
    assert "mounted" in proc.stdout
    # a version mount says where the version's files are: MNT holds only the datasets' names
    assert f"imagenet@golden: {mnt}/data/imagenet/golden\n" in proc.stdout, proc.stdout
    # the tour's `ls` lists records (newuser19: its `--filter labels.class=cat` listed none, since
    # an import by reference has no labels, and said so on stderr only)
    assert "train/cat/0001.jpg" in proc.stdout, proc.stdout
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        assert catalog.resolve("imagenet", "golden").record_count == 6
        packed = catalog.resolve("imagenet-224")  # the pack ran over the tagged version
        assert packed.lineage["kind"] == "pack" and packed.lineage["source_dataset"] == "imagenet"
        outputs = catalog.resolve("outputs")  # the workspace's umount committed what the job wrote
        assert [r.key for r in catalog.list_records("outputs", outputs.seq)] == ["metrics.txt"]
    finally:
        catalog.close()
