"""A workspace volume whose node token cannot commit into its ``commitTo`` (csinode15).

The commit a workspace volume makes when it is unpublished (unstaged) uses the node plugin's
catalog token, not the pod's. A token holding only ``reader`` on the dataset published the
volume (the pod's service account was a writer), then every NodeUnpublishVolume failed on the
refused commit, and the pod stayed Terminating until someone granted ``writer``. The plugin
now asks the server for its own role (``GET /v1/datasets/{name}/access``) at NodePublish and
NodeStage and refuses there, PERMISSION_DENIED naming the dataset, the token's principal and
the grant. A role taken away after the publish still refuses the commit: the unpublish is
PERMISSION_DENIED saying the files are flushed and kept and what ends it, the volume stays
recorded, and once the grant is back the kubelet's next retry commits the pod's files.

Driven as the kubelet does: over the plugin's gRPC socket, a real ``datahub serve --auth``
as its catalog, real FUSE mounts.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from datahub.catalog import open_catalog
from datahub.errors import DatasetNotFound
from tests.csi.conftest import CsiEnv, Plugin, mounts_under
from tests.csi.test_api_catalog import api_module_plugin, api_plugin
from tests.csi.test_publish import pod_info

pytestmark = pytest.mark.fuse
__all__ = ["api_module_plugin", "api_plugin"]  # the fixtures, used by name

SA = "system:serviceaccount:team-a:trainer"
NODE = "csi-node"  # the principal of the node token api_plugin issues


def _set_acl(csi_env: CsiEnv, name: str, acl: dict[str, str]) -> None:
    catalog = open_catalog(csi_env.config.resolved_catalog_url)
    try:
        try:
            catalog.update_dataset(name, acl=acl)
        except DatasetNotFound:  # first use in this module's environment: make it
            catalog.create_dataset(name, owner="team-a-admin", acl=acl)
    finally:
        catalog.close()


def _records(csi_env: CsiEnv, name: str) -> dict[str, bytes]:
    catalog = open_catalog(csi_env.config.resolved_catalog_url)
    try:
        if catalog.store.head(name) == 0:
            return {}
        records = list(catalog.list_records(name, None))
    finally:
        catalog.close()
    s3 = csi_env.endpoint.client()
    prefix = f"s3://{csi_env.bucket}/"
    return {
        r.key: s3.get_object(Bucket=csi_env.bucket, Key=r.url[len(prefix) :])["Body"].read() for r in records
    }


def _inline(dataset: str, workspace: str) -> dict[str, str]:
    return {
        "workspace": workspace,
        "commitTo": dataset,
        "csi.storage.k8s.io/ephemeral": "true",
        **pod_info("team-a", "trainer"),
    }


def _refused(call) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as err:
        call()
    return err.value


def test_a_node_token_that_may_only_read_the_commit_to_dataset_is_refused_at_publish(
    api_plugin: Plugin, csi_env: CsiEnv
) -> None:
    _set_acl(csi_env, "read-only-results", {SA: "writer", NODE: "reader"})
    target = csi_env.target("ro-node")
    err = _refused(
        lambda: api_plugin.publish(target, _inline("read-only-results", "ro-node"), volume_id="ro-node")
    )
    details = err.details()
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED, details
    assert "'read-only-results'" in details and f"({NODE!r}) holds only the reader role" in details, details
    assert f"--grant {NODE}=writer" in details, details
    assert api_plugin.state() == [] and mounts_under(csi_env.root / "pods") == []

    _set_acl(csi_env, "read-only-results", {SA: "writer", NODE: "writer"})  # what the message says to do
    api_plugin.publish(target, _inline("read-only-results", "ro-node"), volume_id="ro-node")
    Path(target, "out.txt").write_bytes(b"granted\n")
    api_plugin.unpublish(target, "ro-node")
    assert _records(csi_env, "read-only-results") == {"out.txt": b"granted\n"}
    assert api_plugin.state() == []


def test_a_staged_workspace_is_refused_at_stage(api_plugin: Plugin, csi_env: CsiEnv) -> None:
    """NodeStage has no pod yet, but the commit at unstage is the node token's: asked there."""
    _set_acl(csi_env, "staged-ro-results", {SA: "writer", NODE: "reader"})
    staging = csi_env.target("staged-ro")
    Path(staging).mkdir()
    context = {"workspace": "staged-ro", "commitTo": "staged-ro-results"}
    err = _refused(lambda: api_plugin.stage(staging, context, volume_id="staged-ro"))
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED, err.details()
    assert "'staged-ro-results'" in err.details() and f"--grant {NODE}=writer" in err.details()
    assert api_plugin.state() == [] and mounts_under(Path(staging).parent) == []


@pytest.mark.parametrize("left", ["reader", None], ids=["demoted-to-reader", "role-revoked"])
def test_a_role_taken_away_after_publish_keeps_the_files_and_says_what_ends_it(
    api_plugin: Plugin, csi_env: CsiEnv, left: str | None
) -> None:
    dataset, workspace = f"revoked-{left or 'none'}", f"revoked-{left or 'none'}"
    _set_acl(csi_env, dataset, {SA: "writer", NODE: "writer"})
    target = csi_env.target(workspace)
    api_plugin.publish(target, _inline(dataset, workspace), volume_id=workspace)
    Path(target, "model.bin").write_bytes(b"weights" * 100)
    _set_acl(csi_env, dataset, {SA: "writer", **({NODE: left} if left else {})})

    for _ in range(2):  # the kubelet retries; each answer says the same
        err = _refused(lambda: api_plugin.unpublish(target, workspace))
        details = err.details()
        assert err.code() == grpc.StatusCode.PERMISSION_DENIED, details
        assert f"workspace 'team-a.{workspace}' is flushed to the object store and kept" in details, details
        assert f"into {dataset!r} was refused" in details and NODE in details, details
        assert (
            "the next retry (NodeUnpublishVolume; NodeUnstageVolume for a staged volume) commits" in details
        ), details
        [record] = api_plugin.state()
        assert record["volume_id"] == workspace and record["unpublishing"]
    assert _records(csi_env, dataset) == {}  # nothing committed without the role

    _set_acl(csi_env, dataset, {SA: "writer", NODE: "writer"})
    api_plugin.unpublish(target, workspace)
    assert _records(csi_env, dataset) == {"model.bin": b"weights" * 100}
    assert api_plugin.state() == [] and mounts_under(csi_env.root / "pods") == []
