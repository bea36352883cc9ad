"""What newuser44 met in ``make run``: the local-disk baseline read other files than the mount.

After a record was removed (``sample@latest`` holding 299 records), the mount step's epochs read
the version's 299 files through the mount and then every JPEG under the sample's directory, 300
of them, on local disk: the printed ratio compared two different epochs. Both now read the
mounted version's file list (``fuse_adapter.demo_step.epoch_files``): a record's local file is
the one it was imported from, and one without a local file is copied to ``<home>/epoch-local``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from datahub.catalog import Delete, Put, Record, open_catalog
from tests.cli.test_demo import start

QUICK = ["--no-wait", "--skip", "listen", "--skip", "serve"]


@pytest.mark.slow
def test_the_local_baseline_reads_exactly_the_mounted_versions_files(tmp_path: Path) -> None:
    if not os.path.exists("/dev/fuse"):
        pytest.skip("no /dev/fuse: the demo skips its mount step")
    home = tmp_path / "var"
    first = start(["-m", "datahub.demo", "--home", str(home), *QUICK, "--skip", "mount"], tmp_path)
    out, err = first.communicate(timeout=600)
    assert first.returncode == 0, out + err
    with open_catalog(f"sqlite:///{home / 'catalog.db'}") as catalog:
        keys = sorted(r.key for r in catalog.list_records("sample", 1))
        kept = next(r for r in catalog.list_records("sample", 1) if r.key == keys[1])
        # v2: one record removed, one added under a key no sample file has (another's object)
        catalog.commit(
            "sample",
            [Delete(keys[0]), Put(Record("extra/copy.jpg", kept.url, kept.etag, kept.size))],
            message="one removed, one added",
        )
        catalog.commit("sample", [Delete(keys[2])], message="another removed")
    proc = start(["-m", "datahub.demo", "--home", str(home), *QUICK], tmp_path)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, out + err
    said = out + err
    epochs = re.findall(r"torch DataLoader (.+?): (\d+) images in [\d.]+s", said)
    assert epochs == [
        ("epoch 1 over the mount", "299"),
        ("epoch 2 over the mount", "299"),
        ("the same epoch over the same files on local disk", "299"),
    ], said
