"""caller74: a version mount through an API server whose token is revoked, or whose role on
the dataset is removed, while it runs.

What it keeps: the names it has listed and the bytes of the files among them (from this
node's cache, else from the origin with the node's own storage credentials, which the
catalog never governed). What it loses: every listing not made yet, and no new version is
resolved. Before, such a listing was EIO ("unknown, not absent", as for a catalog that does
not answer, retried at every lookup) and a removed role read in the mount's log as "dataset
'rev' not found; create it first": the dataset the mount was serving. Now it is EACCES, and
the log says the catalog refused this mount's token for that dataset, what stays readable
and what to do (docs/fuse.md, "A revoked token").
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from datahub.api.tokens import issue_token, revoke_token
from datahub.catalog import open_catalog
from datahub.catalog.model import Put
from datahub.config import load_config
from tests.catalog.remote import serve
from tests.fuse.conftest import FuseEnv, upload_dataset

pytestmark = pytest.mark.fuse


@pytest.mark.parametrize("how", ["token revoked", "role removed"])
def test_a_refused_mount_keeps_what_it_listed_and_lists_nothing_new(
    env: FuseEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    objects = {f"d{i}/f{j}.bin": bytes([i * 3 + j]) * (5000 + j) for i in range(3) for j in range(2)}
    upload_dataset(env, "rev", objects)
    local = open_catalog(env.config.resolved_catalog_url)
    try:
        records = list(local.list_records("rev", None))
    finally:
        local.close()
    server, backing, _admin = serve(tmp_path / "server")
    try:
        backing.create_dataset("rev", owner="owner", acl={"alice": "reader"})
        backing.commit("rev", [Put(r) for r in records], message="v1")
        alice = issue_token(backing.store, "alice")[0]
        path = env.root / "through-api.toml"
        path.write_text(f'catalog_url = "{server.url}"\n' + env.config_path.read_text())
        through_api = FuseEnv(env.root, path, load_config(path, env={}), env.bucket, env.endpoint)
        mnt = env.mountpoint("rev")
        monkeypatch.setenv("DATAHUB_API_TOKEN", alice)
        with through_api.mounted(mnt, "rev@v1", "--no-prefetch"):
            v1 = mnt / "rev" / "v1"
            assert (v1 / "d0" / "f0.bin").read_bytes() == objects["d0/f0.bin"]  # cached
            assert sorted(os.listdir(v1 / "d1")) == ["f0.bin", "f1.bin"]  # listed, not read
            if how == "token revoked":
                revoke_token(backing.store, alice)
            else:
                backing.update_dataset("rev", acl={})
            assert (v1 / "d0" / "f0.bin").read_bytes() == objects["d0/f0.bin"]
            assert (v1 / "d1" / "f1.bin").read_bytes() == objects["d1/f1.bin"]
            for probe in (lambda: os.listdir(v1 / "d2"), lambda: os.stat(v1 / "d2" / "f0.bin")):
                with pytest.raises(OSError) as caught:
                    probe()
                assert caught.value.errno == errno.EACCES, how
            if how == "role removed":  # given back: the next lookup lists, no remount
                backing.update_dataset("rev", acl={"alice": "reader"})
                assert sorted(os.listdir(v1 / "d2")) == ["f0.bin", "f1.bin"]
        log = (env.root / "mount-rev.log").read_text()
        assert "the catalog refused this mount's token for dataset 'rev'" in log, log[-3000:]
        assert "create it first" not in log and "remount" in log
    finally:
        server.stop()
        backing.close()
