"""The two images as a cluster runs them (docs/kubernetes.md, docs/deployment.md "What a node
holds"): the server image serves the catalog (`datahub serve --auth` as uid 10001, its SQLite
under its own home), and the CSI image's node plugin (`--mode node`) is its client as
docs/kubernetes.md's overlay makes it one: its configuration file keeps the MongoDB URL the
controller needs (the ConfigMap both share), and its own variables `DATAHUB_CATALOG_URL =
http://…` and `DATAHUB_API_TOKEN` (a non-admin token) override it. Driven over the plugin's
gRPC socket as the kubelet drives it, these are what an operator meets first after installing
both:

- a dataset PV: staged once (NodeStage), published into pods (NodePublish from the stage);
  every publish checks its pod's service account against the access list the server holds,
  and the pod reads the committed bytes, through a mount process that got the token;
- an inline workspace written `eval-${pod.name}` is its namespace's, `<namespace>.eval-<pod>`:
  its files reach the object store under that name when the pod's volume goes, and are
  committed into its `commitTo` dataset, which the node's token and the pod may write (with no
  `commitTo` a server gives the workspace's writer lease to a global admin's token only:
  docs/csi.md);
- a bucket volume reads with credentials of its own only: refused without them;
- a dataset the node's token may not read is hidden by the server: NOT_FOUND naming it.

Run by `make image-test` only, like test_built_images.py (which builds and checks the images
one by one).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from tests.csi.conftest import Mode, mounts_under, write_config
from tests.csi.test_publish import pod_info, read_tree
from tests.images.test_built_images import (
    CSI_IMAGE,
    SERVER_IMAGE,
    ImagePlugin,
    _get,
    image_root,
    serving,
    token,
)
from tests.servers import S3Endpoint
from tests.writeback.flushed import workspace_object_key

pytestmark = [pytest.mark.slow, pytest.mark.fuse]

TRAINER = "system:serviceaccount:team-a:trainer"
NODE = "csi-node"  # the node plugin's token's principal: no admin, reader where granted
CONTROLLER_CATALOG = "mongodb://127.0.0.1:9/datahub?serverSelectionTimeoutMS=3000"
FILES = {"train/a.bin": os.urandom(200_000), "train/b.bin": b"bee" * 1000, "README": b"v1\n"}


@dataclass
class Cluster:
    root: Path  # a shared mount: the pods' targets and the plugin's state, seen inside its image root
    plugin: ImagePlugin
    endpoint: S3Endpoint
    bucket: str  # objects_url's bucket: datasets' objects, flushed workspaces
    url: str = ""  # the server's API
    admin: str = ""  # an admin token of it

    def target(self, name: str) -> str:
        parent = self.root / "pods" / name
        parent.mkdir(parents=True, exist_ok=True)
        return str(parent / "mount")

    def staging(self, name: str) -> str:
        path = self.root / "plugins" / name / "globalmount"
        path.mkdir(parents=True, exist_ok=True)
        return str(path)


def _commit_dataset(
    url: str,
    admin: str,
    endpoint: S3Endpoint,
    bucket: str,
    name: str,
    acl: dict,
    sources: list[str] | None = None,
) -> None:
    """Dataset ``name`` v1 of FILES (objects put into S3 first) with access list ``acl``,
    through the server's API."""
    client = endpoint.client()
    changes = []
    for key, data in sorted(FILES.items()):
        etag = client.put_object(Bucket=bucket, Key=f"data/{key}", Body=data)["ETag"].strip('"')
        record = {"key": key, "url": f"s3://{bucket}/data/{key}", "etag": etag, "size": len(data)}
        changes.append({"op": "put", "record": record})
    status, body = _get(url + "/v1/datasets", admin, json.dumps({"name": name}).encode())
    assert status == 201, body
    status, body = _get(
        url + f"/v1/datasets/{name}/commits", admin, json.dumps({"changes": changes}).encode()
    )
    assert status == 201, body
    update = {"acl": acl} if sources is None else {"acl": acl, "sources": sources}
    status, body = _get(url + f"/v1/datasets/{name}", admin, json.dumps(update).encode(), method="PATCH")
    assert status == 200, body


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, moto_endpoint: S3Endpoint) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("cluster")
    bucket = moto_endpoint.new_bucket("cluster")
    subprocess.run(["mount", "--bind", str(root), str(root)], check=True)
    subprocess.run(["mount", "--make-shared", str(root)], check=True)
    try:
        with image_root(SERVER_IMAGE) as server, image_root(CSI_IMAGE) as csi:
            home = server.config.get("WorkingDir") or "/var/lib/datahub"
            admin, node = token(server, home, "ops", admin=True), token(server, home, NODE)
            with serving(server, home) as url:
                _commit_dataset(
                    url, admin, moto_endpoint, bucket, "imgs", {TRAINER: "reader", NODE: "reader"}
                )
                _commit_dataset(
                    url, admin, moto_endpoint, bucket, "hidden", {TRAINER: "reader"}
                )  # node: no grant
                _commit_dataset(  # an inline workspace's commitTo: the node and the pod write it, and
                    # its records may point under the plugin's objects_url (the blobs it pins)
                    url,
                    admin,
                    moto_endpoint,
                    bucket,
                    "evals",
                    {TRAINER: "writer", NODE: "writer"},
                    sources=[f"s3://{bucket}/objects/"],
                )
                config = write_config(root, moto_endpoint, bucket)
                # the ConfigMap's URL, which the controller uses: unreachable here, never used by the node
                config.write_text(f'catalog_url = "{CONTROLLER_CATALOG}"\n' + config.read_text())
                csi.bind(root)
                env = {"DATAHUB_CATALOG_URL": url, "DATAHUB_API_TOKEN": node}
                plugin = ImagePlugin(csi, root, config, env=env, mode="node")
                try:
                    plugin.start()
                    yield Cluster(root, plugin, moto_endpoint, bucket, url, admin)
                    log = plugin.log_path.read_text(errors="replace")
                    assert "Traceback" not in log, log[-3000:]
                finally:
                    plugin.teardown()
    finally:
        for point in mounts_under(root):
            subprocess.run(["umount", "-l", point], capture_output=True)
        subprocess.run(["umount", "-l", str(root)], capture_output=True)


def _code(call) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as err:
        call()
    return err.value.code()


def test_a_dataset_pv_is_staged_once_and_published_to_the_pods_its_access_list_names(
    cluster: Cluster,
) -> None:
    plugin, staging = cluster.plugin, cluster.staging("pv-imgs")
    context = {"dataset": "imgs", "version": "1"}
    reader = Mode.MULTI_NODE_READER_ONLY
    plugin.stage(staging, context, volume_id="pv-imgs", mode=reader)
    allowed, denied = cluster.target("team-a-trainer"), cluster.target("team-b-trainer")
    try:
        plugin.publish(allowed, {**context, **pod_info("team-a", "trainer")},
                       volume_id="pv-imgs", staging=staging, readonly=True, mode=reader)  # fmt: skip
        assert read_tree(allowed) == FILES
        refused = _code(lambda: plugin.publish(denied, {**context, **pod_info("team-b", "trainer")},
                                               volume_id="pv-imgs", staging=staging, readonly=True, mode=reader))  # fmt: skip
        assert refused == grpc.StatusCode.NOT_FOUND  # a dataset the pod may not read: as missing (caller72)
        assert denied not in mounts_under(cluster.root)
    finally:
        plugin.unpublish(allowed, "pv-imgs")
    plugin.unstage(staging, "pv-imgs")
    assert mounts_under(cluster.root / "pods") == [] and mounts_under(cluster.root / "plugins") == []
    assert plugin.state() == []


def test_an_inline_workspace_is_its_namespaces_and_flushes_to_the_object_store(cluster: Cluster) -> None:
    plugin, target = cluster.plugin, cluster.target("eval")
    context = {"workspace": "eval-${pod.name}", "commitTo": "evals", "csi.storage.k8s.io/ephemeral": "true"}
    plugin.publish(target, {**context, **pod_info("team-a", "trainer")}, volume_id="csi-eval")
    try:
        [record] = [p for p in plugin.state() if p["target_path"] == target]
        assert record["spec"]["workspace"] == "team-a.eval-trainer-0"
        Path(target, "model.pt").write_bytes(b"team a's weights")
    finally:
        plugin.unpublish(target, "csi-eval")
    client = cluster.endpoint.client()
    key = workspace_object_key(client, cluster.bucket, "team-a.eval-trainer-0", "model.pt")
    got = client.get_object(Bucket=cluster.bucket, Key=key)["Body"].read()
    assert got == b"team a's weights"
    status, body = _get(f"{cluster.url}/v1/datasets/evals/versions/latest/records/model.pt", cluster.admin)
    assert status == 200, body  # committed into its commitTo dataset at the unpublish
    assert json.loads(body)["size"] == len(b"team a's weights")
    assert mounts_under(cluster.root / "pods") == []


def test_a_bucket_volume_reads_with_credentials_of_its_own_only(cluster: Cluster) -> None:
    plugin, target = cluster.plugin, cluster.target("raw")
    bucket = cluster.endpoint.new_bucket("raw")
    client = cluster.endpoint.client()
    raw = {"2024/x.txt": b"ex\n", "2024/y.bin": os.urandom(70_000)}
    for key, data in raw.items():
        client.put_object(Bucket=bucket, Key=f"raw/{key}", Body=data)
    context = {"bucket": bucket, "prefix": "raw", **pod_info("team-a", "trainer")}
    assert (
        _code(lambda: plugin.publish(target, context, volume_id="raw")) == grpc.StatusCode.PERMISSION_DENIED
    )
    assert target not in mounts_under(cluster.root)
    own = {"s3AccessKeyId": cluster.endpoint.access_key, "s3SecretAccessKey": cluster.endpoint.secret_key}
    plugin.publish(target, context, volume_id="raw", secrets=own)
    try:
        got = read_tree(target)
        assert {k: v for k, v in got.items() if not k.startswith(".datahub")} == raw
    finally:
        plugin.unpublish(target, "raw")
    assert mounts_under(cluster.root / "pods") == []


def test_a_dataset_the_nodes_token_may_not_read_is_not_found(cluster: Cluster) -> None:
    """The pod is granted, the node's token is not: the server hides the dataset from the
    token (404, as if missing), so the pod's volume fails NOT_FOUND naming it (docs/kubernetes.md
    tells the operator to grant the node's principal reader)."""
    target = cluster.target("hidden")
    context = {"dataset": "hidden", "version": "1", **pod_info("team-a", "trainer")}
    with pytest.raises(grpc.RpcError) as err:
        cluster.plugin.publish(target, context, volume_id="hidden", readonly=True)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND and "hidden" in err.value.details()
    assert target not in mounts_under(cluster.root)
