"""A workspace mount whose catalog is an API server takes its writer lease for its
``--commit-to`` (lease15): the server lets a writer of that dataset take it, and refuses a
token with no role that names no target (docs/api.md, "Workspace writer leases")."""

from __future__ import annotations

from pathlib import Path

import pytest

from datahub.api.tokens import issue_token
from datahub.config import load_config
from tests.catalog.remote import serve
from tests.fuse.conftest import FuseEnv

pytestmark = pytest.mark.fuse


def test_a_mount_names_its_commit_target_in_the_lease_a_server_checks(
    env: FuseEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, backing, _admin = serve(tmp_path / "server")
    try:
        backing.create_dataset("pets", owner="owner", acl={"bob": "writer"})
        backing.update_dataset("pets", sources=[f"s3://{env.bucket}/objects/blobs/"])  # where commits pin
        bob, eve = (issue_token(backing.store, who)[0] for who in ("bob", "eve"))
        path = env.root / "through-api.toml"
        text = env.config_path.read_text()
        path.write_text(text.replace("objects_url =", f'catalog_url = "{server.url}"\nobjects_url =', 1))
        through_api = FuseEnv(env.root, path, load_config(path, env={}), env.bucket, env.endpoint)
        mnt = env.mountpoint("training")
        monkeypatch.setenv("DATAHUB_API_TOKEN", eve)
        refused = pytest.raises(AssertionError, match="names no commit target")
        with refused, through_api.mounted(mnt, "--workspace", "training"):
            pass
        monkeypatch.setenv("DATAHUB_API_TOKEN", bob)
        with through_api.mounted(mnt, "--workspace", "training", "--commit-to", "pets"):
            (mnt / "model.pt").write_bytes(b"weights")
            lease = backing.store.lease("training")
            assert lease is not None and lease.dataset == "pets" and lease.holder.endswith("[bob]")
        assert {r.key: r.size for r in backing.list_records("pets", None)} == {"model.pt": 7}
    finally:
        server.stop()
        backing.close()
