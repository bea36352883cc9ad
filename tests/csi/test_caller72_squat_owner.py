"""caller72: a bucket volume's ``.datahub`` names no other tenant's identity.

A bucket volume records its listing into the snapshot dataset ``s3.<bucket>.<prefix>`` only
when that dataset is as mounts make it (no owner, no access list, the bucket's URL as its
source); a dataset squatting the name (made by a token before only global admins could, or
by a local user) receives nothing, and ``.datahub`` says why (docs/fuse.md, "Bucket
snapshots"). It said it with the squatter's owner and access list ("owned by 'mallory'; an
access list granting …"), which the mount read with the plugin's catalog credentials, to
every pod of the volume, whose own credentials are S3 keys for the bucket and no role on that
dataset. Now a mount other accounts read (``--allow-other``: every CSI volume) says only that
the dataset is not a snapshot as mounts make it and that the mount's log says why; the log
(the node's, the operator's) still names them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from datahub.catalog import open_catalog
from tests.csi.conftest import CsiEnv, Plugin, wait_until
from tests.csi.test_publish import pod_info

pytestmark = pytest.mark.fuse


def test_a_squatted_snapshot_is_refused_without_naming_its_owner_to_the_pod(
    plugin: Plugin, csi_env: CsiEnv
) -> None:
    csi_env.endpoint.client().put_object(Bucket=csi_env.bucket, Key="c72squat/a.txt", Body=b"a\n")
    name, source = f"s3.{csi_env.bucket}.c72squat", f"s3://{csi_env.bucket}/c72squat"
    catalog = open_catalog(csi_env.config.resolved_catalog_url)
    try:
        catalog.create_dataset(name, source=source, owner="mallory", acl={"mallorys-friend": "reader"})
    finally:
        catalog.close()
    own = {"s3AccessKeyId": csi_env.endpoint.access_key, "s3SecretAccessKey": csi_env.endpoint.secret_key}
    context = {
        "bucket": csi_env.bucket,
        "prefix": "c72squat",
        "csi.storage.k8s.io/ephemeral": "true",
        **pod_info("team-a", "lister"),
    }
    target = csi_env.target("c72-squat")
    plugin.publish(target, context, volume_id="c72-squat", secrets=own)
    try:
        assert Path(target, "a.txt").read_bytes() == b"a\n"  # the listing is served

        def ready() -> bool:
            return json.loads(Path(target, ".datahub").read_text())["state"] == "ready"

        wait_until(ready, 30, "the listing")
        text = Path(target, ".datahub").read_text()
    finally:
        plugin.unpublish(target, "c72-squat")
    info = json.loads(text)
    assert info["versions"] == [] and info["snapshot"].startswith(f"not committed: dataset {name!r}"), info
    assert "mallory" not in text, info["snapshot"]  # neither the owner nor the access list's principals
    assert "the mount's log says why" in info["snapshot"], info["snapshot"]
